"""Attention with both dots as `bf16_pass`: what a TPU runs for the default precision (an adversary against a reference that asks for HIGHEST)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _attention as a  # noqa: E402


@a.jit
def workload(q, k, v, interpret=False):
    return a.attention(q, k, v, a.bf16_pass, interpret=interpret)
