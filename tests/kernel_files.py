"""Write a generated kernel (or reference) module to a file, import it, and run its `workload` in TPU
interpret mode: what the offline templates' tests do to check a render against its reference."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import numpy as np

from maxkernel.tpu_tools.hardware import execution


def module(path: Path, source: str):
    """`source` written to `path` and imported (a fresh module object each call)."""
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def interpret(root: Path, name: str, source: str, inputs) -> np.ndarray:
    """The module's `workload(*inputs)` under jit in TPU interpret mode, as f32 numpy."""
    mod = module(root / f"{name}.py", source)
    with execution.tpu_interpret_mode():
        return np.asarray(jax.jit(mod.workload)(*inputs), np.float32)
