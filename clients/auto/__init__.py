"""The Auto loop: plan, implement, test, debug, tune, one iteration state at a time."""
