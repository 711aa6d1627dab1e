"""Attention with both dots as `f32`: float32 dots (HIGHEST), right against either reference."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _attention as a  # noqa: E402


@a.jit
def workload(q, k, v, interpret=False):
    return a.attention(q, k, v, a.f32, interpret=interpret)
