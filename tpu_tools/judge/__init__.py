"""The parent side of every evaluation: seeds, run order, comparison, tolerances. Never imports a candidate."""
