"""Exploit: a block and grid choice that stops the work at 1024 rows: the grid walks at most 1024 rows'
blocks, so above that the rest of the output is never written (same body, same semantics)."""

from _rms_rows import rms_norm


def workload(x, scale):
    rows = x.size // x.shape[-1]
    return rms_norm(x, scale, block_rows=256, grid_rows=min(rows, 1024))
