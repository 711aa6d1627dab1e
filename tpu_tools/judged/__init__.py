"""The only code that runs inside a candidate's process: load it, run it, guard the judge, report."""
