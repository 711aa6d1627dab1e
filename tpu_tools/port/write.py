"""Render a translation as a JAX reference file in maxkernel's format.

The file needs jax only: CONFIG, SIZES (`full` is the source's own shape, `small` a smaller batch where the
export let the batch vary), SOURCE_PARAMS (the source's parameters and buffers the port takes, in input
order after the activations), create_inputs (activations and parameters drawn from the key, in the source's
value ranges, never fixed and never zeros) and workload.
"""

from __future__ import annotations

import ast
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


def _fit(
    values: dict[str, int], sizes: dict[str, dict[str, int]], used: set[str] | None = None
) -> str | None:
    """One dimension's value at every size as an expression of that size's dict `d`: a literal, a size
    global, or a fixed multiple or fraction of one; None when none fits every size. Globals not `used`
    by the tensor's earlier dims come first (height and width equal at every size stay two globals)."""
    first = next(iter(values.values()))
    if all(v == first for v in values.values()):
        return repr(first)
    used = used if used is not None else set()
    names = list(next(iter(sizes.values())))
    names = [g for g in names if g not in used] + [g for g in names if g in used]
    for g in names:
        if all(values[s] == sizes[s][g] for s in values):
            used.add(g)
            return f'd["{g}"]'
    for g in names:
        if all(sizes[s][g] and values[s] % sizes[s][g] == 0 for s in values):
            ratios = {values[s] // sizes[s][g] for s in values}
            if len(ratios) == 1:
                return f'{ratios.pop()} * d["{g}"]'
        if all(values[s] and sizes[s][g] % values[s] == 0 for s in values):
            ratios = {sizes[s][g] // values[s] for s in values}
            if len(ratios) == 1:
                return f'd["{g}"] // {ratios.pop()}'
    return None


def _body(tr: Translation) -> list[str]:
    lines = [f"    {var} = {var.upper()}" for var in tr.constants]
    for s in tr.statements:
        comment = f"  # {s.op}" + (f" <- {s.where}" if s.where else "")
        lines.append(f"    {s.var} = {s.expr}{comment}")
    lines.append(f"    return {', '.join(tr.outputs)}")
    return lines


def _tokens(text: str) -> list[Any]:
    import io
    import tokenize

    return list(tokenize.generate_tokens(io.StringIO(text).readline))


def _sized_body(per_size: dict[str, Translation], args: str) -> tuple[list[str], list[str]]:
    """(module lines, workload body) for statements written at several sizes: one body where they agree;
    where they differ only in integers (a view's sizes), the integers per size, looked up by the input
    shapes. Raises aten.Unsupported when they differ otherwise."""
    import tokenize

    texts = {size: "\n".join(_body(tr)) for size, tr in per_size.items()}
    first_size = next(iter(texts))
    if len(set(texts.values())) == 1:
        return [], texts[first_size].splitlines()
    toks = {size: _tokens(t) for size, t in texts.items()}
    base = toks[first_size]
    slots: list[int] = []
    aligned = all(len(t) == len(base) for t in toks.values())
    for i, tok in enumerate(base if aligned else []):
        column = [toks[s][i] for s in toks]
        if any(c.type != tok.type for c in column):
            aligned = False
            break
        if len({c.string for c in column}) > 1:
            if tok.type != tokenize.NUMBER:
                aligned = False
                break
            slots.append(i)
    if not aligned:
        return _per_size_bodies(texts, per_size, args)
    rows = texts[first_size].splitlines()
    for k, i in reversed(list(enumerate(slots))):  # right to left: earlier columns stay put
        (r, c0), (_, c1) = base[i].start, base[i].end
        rows[r - 1] = rows[r - 1][:c0] + f"_k[{k}]" + rows[r - 1][c1:]
    body = "\n".join(rows)
    table = {}
    for size, tr in per_size.items():
        key = tuple(tuple(int(x) for x in i.shape) for i in tr.inputs)
        table[key] = tuple(ast.literal_eval(toks[size][i].string) for i in slots)
    module = [
        "# the numbers of the workload's views, masks and scales at each size, keyed by the input shapes",
        f"_SIZE_NUMBERS = {table!r}",
        "",
        "",
        "def _numbers(*xs):",
        "    key = tuple(tuple(int(n) for n in x.shape) for x in xs)",
        "    if key not in _SIZE_NUMBERS:",
        "        raise ValueError(f'this port is written for the input shapes of its SIZES entries only, not {key}')",
        "    return _SIZE_NUMBERS[key]",
    ]
    return module, [f"    _k = _numbers({args})"] + body.splitlines()


def _per_size_bodies(texts: dict[str, str], per_size: dict[str, Translation], args: str):
    """The workload written once per size (the exported graphs differ beyond their numbers: a slice
    that is the whole buffer at one size), chosen by the input shapes."""
    module: list[str] = []
    table: dict[tuple, str] = {}
    for size, text in texts.items():
        fn = f"_workload_{size}"
        module += [f"def {fn}({args}):", *text.splitlines(), "", ""]
        table[tuple(tuple(int(x) for x in i.shape) for i in per_size[size].inputs)] = fn
    module += [
        "# the graph exported at each size, keyed by the input shapes",
        "_SIZE_WORKLOADS = {" + ", ".join(f"{k!r}: {v}" for k, v in table.items()) + "}",
        "",
        "",
        "def _workload_for(*xs):",
        "    key = tuple(tuple(int(n) for n in x.shape) for x in xs)",
        "    if key not in _SIZE_WORKLOADS:",
        "        raise ValueError(f'this port is written for the input shapes of its SIZES entries only, not {key}')",
        "    return _SIZE_WORKLOADS[key]",
    ]
    return module, [f"    return _workload_for({args})({args})"]


def render(
    tr: Translation,
    *,
    name: str,
    source_name: str,
    port_path: str,
    samples: dict[int, Any] | None = None,
    sizes: dict[str, dict[str, int]] | None = None,
) -> str:
    """The port file. `sizes`: the source's size globals per SIZES entry, where they were scaled
    (tr.per_size holds the translation at each of those sizes)."""
    samples = samples or {}
    batch = tr.dynamic_batch
    if sizes:
        return _render_sized(tr, name=name, source_name=source_name, port_path=port_path, samples=samples,
                             sizes=sizes)  # fmt: skip
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


def _header(name: str, source_name: str, port_path: str) -> list[str]:
    return [
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
    ]


def _render_sized(
    tr: Translation, *, name: str, source_name: str, port_path: str, samples: dict[int, Any],
    sizes: dict[str, dict[str, int]],
) -> str:  # fmt: skip
    """A port whose SIZES entries are the source's size globals (SOURCE_GLOBALS): shapes per size."""
    from maxkernel.tpu_tools.port.aten import Unsupported

    per_size = tr.per_size
    for size, other in per_size.items():
        if [i.var for i in other.inputs] != [i.var for i in tr.inputs]:
            raise Unsupported(f"the exported graph has other inputs at size {size!r}")
    float_dtypes = {i.dtype for i in tr.inputs if i.example.is_floating_point()}
    default = DTYPES.get(sorted(float_dtypes)[0] if float_dtypes else "float32", "jnp.float32")
    params = [i for i in tr.inputs if i.kind == "param"]
    lines = _header(name, source_name, port_path) + [
        f"CONFIG = {{'name': {name!r}, 'operator': 'ported', 'source': {source_name!r}, 'port_path': {port_path!r}}}",
        "# each size is the source's size globals (full: its own; small: scaled down, keeping alignments)",
        f"SIZES = {sizes!r}",
        f"SOURCE_GLOBALS = {list(next(iter(sizes.values())))!r}",
        f"SOURCE_PARAMS = {[p.source_name for p in params]!r}",
    ]
    shapes: dict[str, list[tuple[int, ...]]] = {
        s: [tuple(i.shape) for i in per_size[s].inputs] for s in sizes
    }
    dims_text: list[str] = []
    table_needed = False
    for k, inp in enumerate(tr.inputs):
        parts, used = [], set()
        for j in range(len(inp.shape)):
            expr = _fit({s: int(shapes[s][k][j]) for s in sizes}, sizes, used)
            if expr is None:
                table_needed = True
                expr = f"_SHAPES[size][{k}][{j}]"
            parts.append(expr)
        dims_text.append("(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")")
    if table_needed:
        lines.append(f"_SHAPES = {shapes!r}")
    for var, lit in tr.constants.items():
        lines.append(f"{var.upper()} = {lit}")
    args = ", ".join(i.var for i in tr.inputs)
    module_lines, body = _sized_body({s: per_size[s] for s in sizes}, args)
    lines += ["", ""]
    if module_lines:
        lines += module_lines + ["", ""]
    # every size's helpers: the graphs can differ (a mask slice export elides where it is a no-op at that size)
    for h in dict.fromkeys([*tr.helpers, *(h for s in sizes for h in per_size[s].helpers)]):
        lines += [HELPERS[h].strip("\n"), "", ""]
    lines += [
        'def create_inputs(dtype=None, *, key=None, size="full"):',
        "    d = SIZES[size]  # noqa: F841",
        f"    dtype = dtype or {default}",
        "    key = jax.random.key(0) if key is None else key",
        f"    keys = jax.random.split(key, {max(len(tr.inputs), 1)})",
    ]
    for k, inp in enumerate(tr.inputs):
        sample = samples.get(inp.position) if inp.kind == "activation" else None
        lines.append(f"    {inp.var} = {_draw(inp, f'keys[{k}]', dims_text[k], sample)}")
    lines.append(f"    return ({args}{',' if len(tr.inputs) == 1 else ''})")
    lines += ["", "", f"def workload({args}):"] + body
    return "\n".join(lines) + "\n"
