"""An f32 projection at full float32 precision (HIGHEST): right against either reference."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _projection as p  # noqa: E402


@p.jit
def workload(x, w, interpret=False):
    return p.projection(x, w, p.full_f32, interpret=interpret)
