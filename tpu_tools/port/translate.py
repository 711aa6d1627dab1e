"""Translate a loaded source to jnp statements: torch.export's graph, op by op, through the `aten` table.

Paths, in order: torchax (a maintained torch-to-jax library; it makes a callable of the live module, not
a reference file, so it is recorded and used only where it imports), torch.export's graph as exported,
then the same graph decomposed to core ATen where an op is missing from the table. Each statement keeps
the source line it came from, so a mismatch can name its op.
"""

from __future__ import annotations

import functools
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maxkernel.tpu_tools.port import aten
from maxkernel.tpu_tools.port.report import PathTry, PortChange
from maxkernel.tpu_tools.port.source import RANDOM_OPS, TorchSource


@dataclass
class PortInput:
    """One input of the port: an activation of the source's get_inputs(), or a parameter/buffer."""

    var: str
    kind: str  # activation | param
    source_name: str  # 'x' (get_inputs position) or 'fc.weight'
    shape: tuple[int, ...]
    dtype: str  # torch dtype name
    example: Any  # the source's tensor (for its value range)
    position: int = -1  # activations: position in get_inputs()


@dataclass
class Statement:
    var: str
    expr: str
    op: str  # 'aten.linear'
    where: str  # 'line 12: y = self.fc(x)'


@dataclass
class Translation:
    path: str
    inputs: list[PortInput]
    statements: list[Statement]
    outputs: list[str]
    helpers: list[str]
    constants: dict[str, str] = field(default_factory=dict)  # var -> jnp literal (structural buffers)
    dynamic_batch: int | None = None  # the source's batch, when export let dim 0 vary
    paths_tried: list[PathTry] = field(default_factory=list)
    changes: list[PortChange] = field(default_factory=list)
    program: Any = None  # the ExportedProgram that made it
    constant_kinds: dict[str, str | None] = field(default_factory=dict)  # buffer -> tril/triu/literal/None
    per_size: dict[str, Translation] = field(default_factory=dict)  # the same source at other sizes


def _ident(name: str) -> str:
    out = re.sub(r"\W", "_", name)
    return out if out[:1].isalpha() else f"p_{out}"


def _where(node: Any, path: Path) -> str:
    """'line N: code' of the source frame that made this node (the last frame in the source file)."""
    trace = node.meta.get("stack_trace") or ""
    found = ""
    lines = trace.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r'\s*File "(.+)", line (\d+)', line)
        if m and Path(m.group(1)).resolve() == path:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            found = f"line {m.group(2)}: {code}"
    return found


def _render(value: Any, names: dict[Any, str]) -> str:
    import torch

    if isinstance(value, torch.fx.Node):
        return names[value]
    if isinstance(value, list | tuple):
        inner = ", ".join(_render(v, names) for v in value)
        return f"[{inner}]"
    if isinstance(value, float):
        if math.isinf(value):
            return "float('inf')" if value > 0 else "float('-inf')"
        if math.isnan(value):
            return "float('nan')"
        return repr(value)
    if isinstance(value, torch.dtype):
        return aten.DTYPES.get(str(value).removeprefix("torch."), "jnp.float32")
    if isinstance(value, torch.device | torch.layout | torch.memory_format):
        return "None"
    if isinstance(value, bool | int | str) or value is None:
        return repr(value)
    raise aten.Unsupported(f"an argument of type {type(value).__name__}")


def _schema_values(node: Any) -> dict[str, Any]:
    schema = node.target._schema
    values: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            values[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            values[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            values[arg.name] = arg.default_value
    return values


def _structural(t: Any) -> bool:
    """A float buffer of only 0s and 1s, not all equal (a causal mask): kept as the source's constant."""

    if not t.is_floating_point() or t.numel() < 2:
        return False
    return bool(((t == 0) | (t == 1)).all()) and bool((t != t.flatten()[0]).any())


def constant_kind(t: Any) -> str | None:
    """How a non-parameter buffer enters the port: 'tril'/'triu' (a causal mask of ones, rebuilt from
    its shape: it need not be embedded), 'literal' (a mask or index, embedded), None (a weight-like
    float buffer: a port input drawn from the key)."""
    import torch

    if t.is_floating_point() and not _structural(t):
        return None
    if t.dim() >= 2 and t.shape[-1] >= 2 and t.shape[-2] >= 2:
        ones = torch.ones(t.shape[-2:], dtype=t.dtype)
        for kind, fn in (("tril", torch.tril), ("triu", torch.triu)):
            if bool((t == fn(ones)).all()):
                return kind
    return "literal"


def _mask_expr(kind: str, t: Any) -> str:
    dtype = aten.DTYPES.get(str(t.dtype).removeprefix("torch."), "jnp.float32")
    rows, cols = int(t.shape[-2]), int(t.shape[-1])
    shape = tuple(int(s) for s in t.shape)
    return f"jnp.broadcast_to(jnp.{kind}(jnp.ones(({rows}, {cols}), {dtype})), {shape})"


def _literal(t: Any) -> str:
    dtype = aten.DTYPES.get(str(t.dtype).removeprefix("torch."), "jnp.float32")
    return f"jnp.asarray({t.detach().cpu().tolist()!r}, {dtype})"


def emit(ep: Any, source: TorchSource, path_name: str, like: Translation | None = None) -> Translation:
    """jnp statements for an ExportedProgram's graph (raises aten.Unsupported / aten.RandomOp).

    `like`: the translation of the same source at a size that was built (a meta-device source has no
    buffer values: its masks are classified as `like`'s were)."""
    import operator

    import torch
    from torch.export.graph_signature import InputKind

    names: dict[Any, str] = {}
    inputs: list[PortInput] = []
    constants: dict[str, str] = {}
    changes: list[PortChange] = []
    kinds: dict[str, str | None] = {}
    masks: list[Statement] = []
    state = dict(source.model.named_parameters()) | dict(source.model.named_buffers())
    specs = {s.arg.name: s for s in ep.graph_signature.input_specs}
    positions = iter(source.tensor_positions)
    for node in ep.graph.nodes:
        if node.op != "placeholder":
            continue
        spec = specs[node.name]
        if spec.kind == InputKind.USER_INPUT:
            pos = next(positions)
            t = source.inputs[pos]
            var = _ident(node.name)
            names[node] = var
            inputs.append(
                PortInput(var, "activation", f"input {pos}", tuple(t.shape), str(t.dtype)[6:], t, pos)
            )
            continue
        if not node.users:
            continue  # unread in eval mode (BatchNorm's num_batches_tracked)
        target = spec.target
        var = _ident(target)
        names[node] = var
        t = state.get(target)
        if t is None and spec.kind == InputKind.CONSTANT_TENSOR:
            t = ep.constants.get(target)
        if t is None:
            raise aten.Unsupported(f"input {target!r} ({spec.kind.name}) that is no parameter or buffer")
        if spec.kind != InputKind.PARAMETER:
            if t.is_meta:  # a size no tensor was built at: the kind the built size showed
                kind = (like.constant_kinds if like else {}).get(target, "literal")
            else:
                kind = constant_kind(t)
            kinds[target] = kind
        else:
            kind = None
        if kind in ("tril", "triu"):
            masks.append(Statement(var, _mask_expr(kind, t), "constant", f"buffer {target}: {kind} of ones"))
            changes.append(
                PortChange(
                    kind="constant",
                    detail=f"buffer {target} ({str(t.dtype)[6:]}, {tuple(t.shape)}) is a {kind} of ones: "
                    f"rebuilt in the port from its shape (jnp.{kind}), not drawn from the seed",
                )
            )
            continue
        if kind == "literal":
            if t.is_meta:
                raise aten.Unsupported(
                    f"buffer {target!r} at the source's own size: its values are data (not a mask) and "
                    "that size was too big to build"
                )
            if t.numel() > 65536:
                raise aten.Unsupported(
                    f"a {t.numel()}-element buffer {target!r} of masks or indices (too big to embed; "
                    "only a tril/triu of ones is rebuilt from its shape)"
                )
            constants[var] = _literal(t)
            changes.append(
                PortChange(
                    kind="constant",
                    detail=f"buffer {target} ({str(t.dtype)[6:]}, {tuple(t.shape)}) kept as the source's "
                    "constant: a mask or index, not a weight drawn from the seed",
                )
            )
            continue
        inputs.append(PortInput(var, "param", target, tuple(t.shape), str(t.dtype)[6:], t))

    # the port's order: the source's activations (get_inputs order), then its parameters and buffers
    inputs = sorted((i for i in inputs if i.kind == "activation"), key=lambda i: i.position) + [
        i for i in inputs if i.kind == "param"
    ]
    statements: list[Statement] = list(masks)
    helpers: list[str] = []
    outputs: list[str] = []
    src = source.path.resolve()
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            outs = node.args[0]
            outputs = [names[o] for o in (outs if isinstance(outs, list | tuple) else [outs])]
            continue
        if node.op != "call_function":
            raise aten.Unsupported(f"graph node {node.op} {node.target}")
        var = _ident(node.name)
        where = _where(node, src)
        target = node.target
        if isinstance(target, torch._ops.OpOverload):
            name = target.overloadpacket.__name__
            label = f"aten.{name}"
            if name in RANDOM_OPS:
                raise aten.RandomOp(f"{label} draws random numbers ({where or 'the forward'})")
            handler = aten.OPS.get(name)
            if handler is None:
                raise aten.Unsupported(f"{label}" + (f" ({where})" if where else ""))
            try:
                expr = handler(aten.Args(_schema_values(node), lambda v: _render(v, names), node))
            except aten.Unsupported as e:
                raise aten.Unsupported(f"{e}" + (f" ({where})" if where else "")) from None
            helpers += [h for h in aten.USES.get(name, ()) if h not in helpers]
        elif target in aten.PY_OPS:
            label = getattr(target, "__name__", str(target))
            expr = aten.PY_OPS[target].format(*(_render(a, names) for a in node.args))
        elif target is operator.getitem:
            label = "getitem"
            expr = f"{_render(node.args[0], names)}[{node.args[1]}]"
        else:
            raise aten.Unsupported(f"{target}" + (f" ({where})" if where else ""))
        names[node] = var
        statements.append(Statement(var, expr, label, where))
    return Translation(
        path_name,
        inputs,
        statements,
        outputs,
        helpers,
        constants,
        changes=changes,
        program=ep,
        constant_kinds=kinds,
    )


@functools.cache
def _try_torchax() -> PathTry:
    try:
        import torchax  # noqa: F401
    except Exception as e:  # an installed torchax that breaks on this torch (0.0.13 on torch 2.13.0)
        first = (str(e).splitlines() or [""])[0][:200]
        return PathTry(path="torchax", ok=False, detail=f"import failed: {type(e).__name__}: {first}")
    return PathTry(
        path="torchax",
        ok=False,
        detail="imports, but makes a callable of the live module, not a reference file; not used to write",
    )


def export(source: TorchSource, *, dynamic: bool = True) -> tuple[Any, int | None, str]:
    """(ExportedProgram, dynamic batch or None, note): dim 0 of every input varies where export allows
    (`dynamic`; a source whose size globals are scaled is exported at each size instead)."""
    import warnings

    import torch

    with warnings.catch_warnings():  # torch's own deprecation notes are not the user's (one-line errors)
        warnings.simplefilter("ignore")
        if not dynamic:
            return torch.export.export(source.model, tuple(source.inputs)), None, ""
        return _export(source)


def _export(source: TorchSource) -> tuple[Any, int | None, str]:
    import torch

    args = tuple(source.inputs)
    tensors = [source.inputs[i] for i in source.tensor_positions]
    batch = tensors[0].shape[0] if tensors and tensors[0].dim() else None
    note = ""
    if batch and batch >= 2 and all(t.dim() and t.shape[0] == batch for t in tensors):
        dim = torch.export.Dim("batch", min=1)
        shapes = tuple({0: dim} if isinstance(a, torch.Tensor) else None for a in args)
        try:
            return torch.export.export(source.model, args, dynamic_shapes=shapes), batch, ""
        except Exception as e:
            note = f"dim 0 cannot vary ({type(e).__name__}): every shape is the source's"
    else:
        note = "the inputs share no batch dim of 2 or more: every shape is the source's"
    return torch.export.export(source.model, args), None, note


def translate(source: TorchSource, *, dynamic: bool = True, like: Translation | None = None) -> Translation:
    """The port's statements, by the first path that covers every op (raises Unsupported naming the op)."""
    tried = [_try_torchax()]
    if source.triton_kernels:
        names = ", ".join(source.triton_kernels)
        raise aten.Unsupported(
            f"the Triton kernel {names}: no automatic path translates Triton; write the port "
            "(the port_to_jax prompt) and check it with --check"
        )
    try:
        ep, batch, note = export(source, dynamic=dynamic)
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise aten.Unsupported(
            f"torch.export cannot trace the forward: {type(e).__name__}: {first}"
        ) from None
    try:
        if like is not None and like.path == "torch.export+decompositions":
            raise aten.Unsupported(like.paths_tried[-2].detail.removeprefix("no translation for "))
        out = emit(ep, source, "torch.export", like)
        tried.append(
            PathTry(path="torch.export", ok=True, detail="every op of the exported graph translated")
        )
    except aten.Unsupported as e:
        tried.append(PathTry(path="torch.export", ok=False, detail=f"no translation for {e}"))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                decomposed = ep.run_decompositions()
            out = emit(decomposed, source, "torch.export+decompositions", like)
        except aten.Unsupported as e2:
            raise aten.Unsupported(str(e2)) from None
        tried.append(PathTry(path="torch.export+decompositions", ok=True, detail="core ATen ops translated"))
    out.paths_tried = tried
    out.dynamic_batch = batch
    if note:
        out.changes.append(PortChange(kind="shape", detail=note))
    return out
