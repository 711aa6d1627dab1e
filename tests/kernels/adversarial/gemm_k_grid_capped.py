"""Exploit (issue 43): a tiled matmul whose K grid stops at 1024 (256-wide K blocks, at most 4 steps): the
whole K at every check size (K <= 1024 there), an eighth of it at the target's 8192."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _matmul_base import tiled_matmul  # noqa: E402


def workload(a, b):
    k = a.shape[1]
    return tiled_matmul(a, b, bm=128, bk=256, bn=128, k_steps=min(k, 1024) // 256)
