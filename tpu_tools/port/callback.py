"""The PyTorch source as a JAX workload (a host callback on CPU): the other side of source parity.

`write_source_reference` writes a reference beside a port whose inputs are the port's and whose outputs
are the source's own, so `validate` can judge a Pallas kernel against the PyTorch source directly (in
interpret mode off the chip), not only against the port.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

_LOADED: dict[str, Any] = {}


def _source(path: str, dims: dict[str, int] | None = None):
    """The source built at `dims` (its size globals; None: as written), once per size, after the memory
    guard (problem/memory.py) has its footprint."""
    from maxkernel.tpu_tools.port.sizing import footprint_at
    from maxkernel.tpu_tools.port.source import load_source
    from maxkernel.tpu_tools.problem.memory import guard

    key = (path, tuple(sorted((dims or {}).items())))
    if key not in _LOADED:
        if dims:
            p = Path(path)
            fp = footprint_at(p, p.read_text(encoding="utf-8"), dims)
            guard(fp.check_bytes(), f"the PyTorch source {p.name} at {dims}")
        _LOADED[key] = load_source(path, sizes=dims)
    return _LOADED[key]


def _dims_for(inputs: tuple, sizes: dict[str, dict] | None, create_inputs: Any) -> dict[str, int] | None:
    """The size globals whose port inputs have these shapes (a port written at several sizes)."""
    import jax

    if not sizes or create_inputs is None:
        return None
    want = [tuple(x.shape) for x in inputs]
    for name, dims in sizes.items():
        specs = jax.eval_shape(lambda name=name: tuple(create_inputs(size=name)))
        if [tuple(s.shape) for s in specs] == want:
            return dict(dims)
    raise ValueError(f"the port's SIZES have no entry with the input shapes {want}")


def source_workload(
    source_path: str, source_params: list[str], port_workload: Any, inputs: tuple,
    sizes: dict[str, dict] | None = None, create_inputs: Any = None,
) -> Any:  # fmt: skip
    """The source's outputs on the port's inputs (activations, then SOURCE_PARAMS), shaped like the port's.
    `sizes`: the port's SIZES when its entries are the source's size globals (SOURCE_GLOBALS)."""
    import jax

    from maxkernel.tpu_tools.port.check import to_numpy, to_torch, torch_to_numpy
    from maxkernel.tpu_tools.port.source import forward

    out_shape = jax.eval_shape(port_workload, *inputs)
    dims = _dims_for(inputs, sizes, create_inputs)

    def host(*arrays):
        import torch

        src = _source(source_path, dims)
        n_act = len(arrays) - len(source_params)
        call = list(src.inputs)
        for k, pos in enumerate(src.tensor_positions[:n_act]):
            call[pos] = to_torch(to_numpy(arrays[k]), src.inputs[pos])
        state = dict(src.model.named_parameters()) | dict(src.model.named_buffers())
        with torch.no_grad():
            for name, arr in zip(source_params, arrays[n_act:], strict=True):
                state[name].copy_(to_torch(to_numpy(arr), state[name]))
        outs = [torch_to_numpy(t) for t in forward(src, call)]
        leaves, tree = jax.tree_util.tree_flatten(out_shape)
        cast = [np.asarray(o).astype(s.dtype) for o, s in zip(outs, leaves, strict=True)]
        return jax.tree_util.tree_unflatten(tree, cast)

    return jax.pure_callback(host, out_shape, *inputs)


def write_source_reference(port: Path, source: Path) -> Path:
    """PORT_source.py beside the port: the port's inputs and sizes, the source's outputs."""
    out = port.with_name(f"{port.stem}_source.py")
    rel_port = port.name
    rel_source = os.path.relpath(source.resolve(), port.parent.resolve())
    out.write_text(
        f'''"""Source parity reference: {rel_port}'s inputs and sizes, the PyTorch source {Path(rel_source).name}'s outputs.

Written by maxkernel port. The workload runs the source on CPU through a host callback, so `validate`
judges a kernel against the PyTorch source itself. Needs torch (maxkernel[torch]).
"""

import importlib.util
from pathlib import Path

from maxkernel.tpu_tools.port.callback import source_workload

_HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_port_of_source", _HERE / {rel_port!r})
_port = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_port)

SOURCE = str((_HERE / {rel_source!r}).resolve())
CONFIG = dict(getattr(_port, "CONFIG", {{}}), name=_port.CONFIG.get("name", "port") + "_source")
SIZES = _port.SIZES
SOURCE_PARAMS = list(_port.SOURCE_PARAMS)
create_inputs = _port.create_inputs


def workload(*inputs):
    sized = SIZES if hasattr(_port, "SOURCE_GLOBALS") else None  # sizes that set the source's globals
    return source_workload(SOURCE, SOURCE_PARAMS, _port.workload, inputs, sized, create_inputs)
''',
        encoding="utf-8",
    )
    return out
