"""Suites: many tasks through the Auto loop or search, their store, scores and reports."""
