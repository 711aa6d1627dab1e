"""`maxkernel-orchestrate model`: hotspots -> extract -> a suite over the top regions -> compose -> one report."""
