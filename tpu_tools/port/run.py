"""`maxkernel port` end to end: load the source, translate (or take --check's port), write, check, report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.port import aten
from maxkernel.tpu_tools.port.callback import write_source_reference
from maxkernel.tpu_tools.port.check import check_port, first_op_off, read_params, to_torch
from maxkernel.tpu_tools.port.report import PortChange, PortReport
from maxkernel.tpu_tools.port.sizing import SizePlan, load_module, plan_sizes
from maxkernel.tpu_tools.port.source import INPUT_FUNCTIONS, SourceFailure, TorchSource, load_source
from maxkernel.tpu_tools.port.translate import Translation, export, translate
from maxkernel.tpu_tools.port.write import render, write
from maxkernel.tpu_tools.problem.memory import MEMORY_SHARE, gib
from maxkernel.tpu_tools.reports import Tolerance


def default_out(source: str) -> Path:
    """examples/torch/gemm.py -> examples/torch/gemm_port.py (beside the source)."""
    p = Path(source)
    return p.with_name(f"{p.stem}_port.py")


def changes_seen(source: TorchSource, ops: set[str] | None) -> list[PortChange]:
    """What the port does differently from the source: layout, narrowed dtypes, mode, in-place ops."""
    out: list[PortChange] = []
    spatial = [x for x in source.inputs if hasattr(x, "dim") and x.dim() >= 3]
    if spatial and any(
        o.startswith(("aten.conv", "aten.max_pool", "aten.avg_pool", "aten.batch_norm")) for o in ops
    ):
        out.append(
            PortChange(kind="layout", detail="NCHW kept: the port takes and returns the source's layout")
        )
    for d in sorted(d for d in source.dtypes if d in ("float64", "int64")):
        to = "float32" if d == "float64" else "int32"
        out.append(PortChange(kind="dtype", detail=f"{d} narrowed to {to} (TPUs have no 64-bit types)"))
    modal = sorted(o for o in ops or () if o in ("aten.batch_norm", "aten.dropout", "aten.instance_norm"))
    if ops is None:
        detail = "eval mode (torch.export cannot trace this source, so its ops are not listed)"
    elif modal:
        detail = f"eval mode: {', '.join(modal)} as in inference (running statistics, no dropout)"
    else:
        detail = "eval mode (no op here behaves differently in training)"
    out.append(PortChange(kind="mode", detail=detail))
    if source.triton_kernels:
        out.append(
            PortChange(
                kind="in_place",
                detail=f"the Triton kernel {', '.join(source.triton_kernels)} stores into a preallocated output; "
                "the port returns its result",
            )
        )
    for op in source.in_place_ops:
        out.append(
            PortChange(kind="in_place", detail=f"{op} runs in place in the source; the port is functional")
        )
    return out


def plan_for(source_path: str, *, runs: int, share: float = MEMORY_SHARE) -> SizePlan:
    """The sizes to port and check at (port/sizing.py); TooBig when none fits the host."""
    path = Path(source_path)
    try:
        text = path.read_text(encoding="utf-8")
        compile(text, str(path), "exec")
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return SizePlan()  # load_source says what is wrong with the file
    return plan_sizes(path, text, runs=runs, share=share)


def plan_sizes_table(plan: SizePlan) -> dict[str, dict[str, int]]:
    """The port's SIZES: full (the source's own), the check size where full did not fit, small."""
    table = {"full": plan.full}
    if plan.check_name != "full":
        table["check"] = plan.check
    table["small"] = plan.small
    return table


def sized_translations(
    source_path: str, plan: SizePlan, tr: Translation, sources: dict[str, TorchSource]
) -> dict[str, Translation]:
    """The translation at every SIZES entry: the built sources as they are, `full` (when it was too big to
    build) on the meta device, its buffers classified as at the built size."""
    import torch

    out: dict[str, Translation] = {plan.check_name: tr}
    for size, dims in plan_sizes_table(plan).items():
        if size in out:
            continue
        if size in sources:
            out[size] = translate(sources[size], dynamic=False, like=tr)
            continue
        if size == "small" and plan.small == plan.check:
            out[size] = tr
            continue
        path = Path(source_path)
        module = load_module(path, path.read_text(encoding="utf-8"), dims)
        base = sources[plan.check_name]
        with torch.device("meta"):
            init = getattr(module, "get_init_inputs", None)
            model = type(base.model)(*(list(init()) if callable(init) else [])).eval()
            raw = next(getattr(module, n) for n in INPUT_FUNCTIONS if callable(getattr(module, n, None)))()
        meta = TorchSource(
            path,
            base.sha256,
            base.kind,
            module,
            model,
            [],
            list(raw) if isinstance(raw, list | tuple) else [raw],
        )
        with torch.device("meta"):  # a tensor the forward makes (a mask) is on meta, beside the inputs
            out[size] = translate(meta, dynamic=False, like=tr)
    return out


def plan_changes(plan: SizePlan) -> list[PortChange]:
    if not plan.names:
        return [PortChange(kind="shape", detail=plan.note)] if plan.note else []
    fp = plan.footprints.get("full")
    need = (
        f" (the source's own shape needs ~{gib(fp.check_bytes())}, ~{fp.check_seconds(4):.0f} s: estimate)"
        if fp
        else ""
    )
    held = "; held: " + "; ".join(plan.held.values()) if plan.held else ""
    return [
        PortChange(
            kind="shape",
            detail=f"size globals {', '.join(plan.names)}: {plan.describe()}{need}; budget "
            f"{gib(plan.budget_bytes)} and {plan.budget_seconds:.0f} s{held}",
        )
    ]


def _ops(program: Any) -> set[str]:
    import torch

    return {
        f"aten.{n.target.overloadpacket.__name__}"
        for n in program.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
    }


def _locator(source: TorchSource, tr: Translation, text: str, names: list[str]):
    """For a port this tool wrote: the first statement whose value leaves the tolerance (op + source line)."""

    def locate(inputs: list[np.ndarray], tol: Tolerance) -> str | None:
        import jax.numpy as jnp
        import torch

        ns: dict[str, Any] = {}
        exec(compile(text, "<port>", "exec"), ns)  # noqa: S102 - the text this tool rendered
        args = ", ".join(i.var for i in tr.inputs)
        body = [f"    {v} = {v.upper()}" for v in tr.constants] + [
            f"    {s.var} = {s.expr}" for s in tr.statements
        ]
        keep = ", ".join(f"{s.var!r}: {s.var}" for s in tr.statements)
        exec(f"def _trace({args}):\n" + "\n".join(body) + f"\n    return {{{keep}}}\n", ns)  # noqa: S102
        values = ns["_trace"](*[jnp.asarray(x) for x in inputs])
        actual = {k: np.asarray(v) for k, v in values.items() if hasattr(v, "shape")}
        gm = tr.program.module()
        acts = [i for i in tr.inputs if i.kind == "activation"]
        every = dict(source.model.named_parameters()) | dict(source.model.named_buffers())
        state = {n: to_torch(a, every[n]) for n, a in zip(names, inputs[len(acts) :], strict=True)}
        gm.load_state_dict(state, strict=False)
        seen: dict[str, np.ndarray] = {}

        class Recorder(torch.fx.Interpreter):
            def run_node(self, n):
                r = super().run_node(n)
                if isinstance(r, torch.Tensor):
                    seen[n.name] = r.detach().float().numpy() if r.is_floating_point() else r.numpy()
                return r

        call = list(source.inputs)
        for k, inp in enumerate(acts):
            call[inp.position] = to_torch(inputs[k], source.inputs[inp.position])
        with torch.no_grad():
            Recorder(gm).run(*call)
        order = [(s.var, f"{s.op}" + (f" ({s.where})" if s.where else "")) for s in tr.statements]
        return first_op_off(seen, actual, order, tol)

    return locate


def port_source(
    source_path: str,
    *,
    out: str | None = None,
    check: str | None = None,
    seeds: int = 3,
    seed_offset: int | None = None,
    allow_weak_check: bool = False,
    memory_share: float = MEMORY_SHARE,
) -> PortReport:
    """Port SOURCE to a JAX reference (or check --check's port) and check it against the source on CPU.

    Raises UsageError for bad input (no Model, inputs that cannot be built, an op no path translates)
    and TooBig (a UsageError) when no check size fits `memory_share` of the host's available memory.
    """
    if not Path(source_path).is_file():
        raise UsageError(f"source file not found: {source_path}")
    if seeds < 2:
        raise UsageError(
            f"port --seeds {seeds}: the check needs at least 2 seeds (its weak-check guard asks whether the "
            "source's output changes with its inputs, which one seed cannot show)"
        )
    try:
        plan = plan_for(source_path, runs=seeds + 1, share=memory_share)
        sources = {}
        if plan.names:  # the source's size globals, scaled to what the host holds
            sources[plan.check_name] = load_source(source_path, sizes=plan.check)
            if plan.small != plan.check:
                sources["small"] = load_source(source_path, sizes=plan.small)
        source = sources.get(plan.check_name) or load_source(source_path)
    except SourceFailure as e:
        return PortReport(
            ok=False, status="source_error", summary=str(e), source=source_path, source_line=e.line
        )
    if source.random_ops:
        raise UsageError(
            f"{source_path}: the forward draws random numbers in eval mode ({', '.join(source.random_ops)}): "
            "no port can match it seed for seed"
        )
    base = dict(source=source_path, source_sha256=source.sha256, source_kind=source.kind)
    tr: Translation | None = None
    locate = None
    required: set[str] | None = None
    ops: set[str] | None = None
    if check is None:
        try:
            tr = translate(source, dynamic=not plan.names)
            if plan.names:
                tr.per_size = sized_translations(source_path, plan, tr, sources)
        except aten.RandomOp as e:
            raise UsageError(f"{source_path}: the forward draws random numbers: {e}") from None
        except aten.Unsupported as e:
            raise UsageError(f"{source_path}: no path can translate {e}") from None
        port = Path(out) if out else default_out(source_path)
        name = Path(source_path).stem
        try:
            text = render(
                tr, name=name, source_name=Path(source_path).name, port_path=tr.path,
                samples=source.input_samples, sizes=plan_sizes_table(plan) if plan.names else None,
            )  # fmt: skip
        except aten.Unsupported as e:
            raise UsageError(f"{source_path}: no path can translate {e}") from None
        write(text, port)
        port_file = str(port)
        names = [i.source_name for i in tr.inputs if i.kind == "param"]
        fp = plan.footprints.get(plan.check_name)
        if fp is None or fp.locate_bytes() <= plan.budget_bytes:
            locate = _locator(source, tr, text, names)  # it holds every intermediate of both sides
        kept = {k for k, v in tr.constant_kinds.items() if v}  # masks and indices the port keeps as constants
        required, ops = read_params(tr.program) - kept, _ops(tr.program)
    else:
        if not Path(check).is_file():
            raise UsageError(f"port file not found: {check}")
        port_file = check
        try:
            program = export(source)[0]
            required, ops = read_params(program), _ops(program)
        except Exception:
            required = None  # a source torch.export cannot trace (Triton): every declared param still varies
    try:
        result = check_port(
            source,
            port_file,
            seeds=seeds,
            seed_offset=seed_offset,
            allow_weak_check=allow_weak_check,
            required_params=required,
            locate=locate,
            at=plan.check_name,
            sources=sources,
        )
    except SourceFailure as e:
        return PortReport(ok=False, status="source_error", summary=str(e), source_line=e.line, **base)
    changes = (tr.changes if tr else []) + changes_seen(source, ops) + plan_changes(plan)
    made = tr.path if tr else "given"
    source_reference = None
    if result.ok and tr is not None:
        source_reference = str(write_source_reference(Path(port_file), source.path))
    if result.ok:
        verb = f"ported by {made}" if tr else "the given port"
        summary = f"{verb} -> {port_file}: {result.summary}"
    else:
        summary = f"port refused ({result.status}): {result.summary}"
    return PortReport(
        ok=result.ok,
        status=("ported" if tr else "checked") if result.ok else "refused",
        summary=summary,
        port=port_file,
        port_path=made,
        paths_tried=tr.paths_tried if tr else [],
        changes=changes,
        check=result,
        source_reference=source_reference,
        **base,
    )
