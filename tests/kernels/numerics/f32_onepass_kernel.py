"""An f32 projection computed the way XLA computes it on a TPU at DEFAULT precision: one bf16 pass."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _projection as p  # noqa: E402


@p.jit
def workload(x, w, interpret=False):
    return p.projection(x, w, p.one_pass, interpret=interpret)
