"""Render a translation as a JAX reference file in maxkernel's format.

The file needs jax only: CONFIG, SIZES (`full` is the source's own shape, `small` a smaller batch where the
export let the batch vary), SOURCE_PARAMS (the source's parameters and buffers the port takes, in input
order after the activations), create_inputs (activations and parameters drawn from the key, in the source's
value ranges, never fixed and never zeros) and workload.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from maxkernel.tpu_tools.port.aten import DTYPES, HELPERS
from maxkernel.tpu_tools.port.translate import PortInput, Translation


def _num(x: float) -> str:
    return f"{x:.4g}"


def small_batch(batch: int) -> int:
    """The small size's batch: an eighth of the source's, at least 1 (2 where the source has 2 or more)."""
    return max(2 if batch >= 2 else 1, batch // 8)


def _draw(inp: PortInput, key: str, shape: str, sample: Any = None) -> str:
    """A jax.random draw in the source tensor's value range (its init's scale for a parameter; for an
    activation, its values over several calls of the inputs function)."""
    import torch

    t = inp.example if sample is None else sample
    t = t.detach().to(torch.float64) if t.is_floating_point() else t
    dtype = DTYPES.get(inp.dtype, "jnp.float32")
    if inp.dtype == "bool":
        return f"jax.random.bernoulli({key}, 0.5, {shape})"
    if not inp.example.is_floating_point():
        lo, hi = int(t.min()), int(t.max())
        return f"jax.random.randint({key}, {shape}, {lo}, {hi + 1}, {dtype})"
    fdt = "dtype"
    lo, hi = float(t.min()), float(t.max())
    mean, std = float(t.mean()), float(t.std()) if t.numel() > 1 else 0.0
    if std == 0.0:  # a constant init (BatchNorm's ones and zeros): spread around it, never the constant
        if mean == 0.0:
            return f"0.1 * jax.random.normal({key}, {shape}, {fdt})"
        return f"{_num(mean)} * jax.random.uniform({key}, {shape}, {fdt}, 0.5, 1.5)"
    if lo >= 0.0:  # non-negative (a variance, a rand() input): keep the sign
        return f"jax.random.uniform({key}, {shape}, {fdt}, {_num(lo)}, {_num(hi)})"
    draw = f"jax.random.normal({key}, {shape}, {fdt})"
    draw = draw if abs(std - 1.0) < 0.05 else f"{_num(std)} * {draw}"
    return draw if abs(mean) < 0.05 * std else f"{_num(mean)} + {draw}"


def render(
    tr: Translation, *, name: str, source_name: str, port_path: str, samples: dict[int, Any] | None = None
) -> str:
    samples = samples or {}
    batch = tr.dynamic_batch
    if batch:
        sizes = {"full": {"batch": batch}, "small": {"batch": small_batch(batch)}}
    else:  # every shape is the source's: small is full (the port's changes say why)
        acts = [i for i in tr.inputs if i.kind == "activation" and i.shape]
        fixed = {"batch": int(acts[0].shape[0])} if acts else {}
        sizes = {"full": fixed, "small": dict(fixed)}
    float_dtypes = {i.dtype for i in tr.inputs if i.example.is_floating_point()}
    default = DTYPES.get(sorted(float_dtypes)[0] if float_dtypes else "float32", "jnp.float32")
    params = [i for i in tr.inputs if i.kind == "param"]
    lines = [
        f'"""{name}: ported from {source_name} by maxkernel port ({port_path}), checked against it on CPU.',
        "",
        "Inputs: the source's get_inputs() tensors, then its parameters and buffers in SOURCE_PARAMS order,",
        "all drawn from the key. Layout as in the source (NCHW kept at the boundary).",
        '"""',
        "",
        "import math  # noqa: F401",
        "",
        "import jax",
        "import jax.numpy as jnp",
        "",
        f"CONFIG = {{'name': {name!r}, 'operator': 'ported', 'source': {source_name!r}, 'port_path': {port_path!r}}}",
        f"SIZES = {sizes!r}",
        f"SOURCE_PARAMS = {[p.source_name for p in params]!r}",
    ]
    for var, lit in tr.constants.items():
        lines.append(f"{var.upper()} = {lit}")
    lines += ["", ""]
    for h in tr.helpers:
        lines += [HELPERS[h].strip("\n"), "", ""]
    lines += [
        'def create_inputs(dtype=None, *, key=None, size="full"):',
        "    d = SIZES[size]",
        f"    dtype = dtype or {default}",
        "    key = jax.random.key(0) if key is None else key",
        f"    keys = jax.random.split(key, {max(len(tr.inputs), 1)})",
    ]
    for k, inp in enumerate(tr.inputs):
        dims = list(inp.shape)
        parts = [repr(int(s)) for s in dims]
        if inp.kind == "activation" and batch:
            parts[0] = 'd["batch"]'
        shape = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
        sample = samples.get(inp.position) if inp.kind == "activation" else None
        lines.append(f"    {inp.var} = {_draw(inp, f'keys[{k}]', shape, sample)}")
    names = ", ".join(i.var for i in tr.inputs)
    lines.append(f"    return ({names}{',' if len(tr.inputs) == 1 else ''})")
    lines += ["", ""]
    lines.append(f"def workload({names}):")
    for var in tr.constants:
        lines.append(f"    {var} = {var.upper()}")
    for s in tr.statements:
        comment = f"  # {s.op}" + (f" <- {s.where}" if s.where else "")
        lines.append(f"    {s.var} = {s.expr}{comment}")
    lines.append(f"    return {', '.join(tr.outputs)}")
    return "\n".join(lines) + "\n"


def write(text: str, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
