"""Measured time: profiling a candidate against its reference, timing statistics, traces, bench, scoreboard."""
