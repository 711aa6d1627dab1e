"""Check a port against its source on CPU: the same inputs and parameters, converted exactly, fresh seeds.

The comparison, tolerance and weak-check guard are `validate`'s (judge/compare.py, problem/tolerances.py):
a port whose every seed a trivial output (zeros, the mean, an input copy) would also pass is `weak_check`,
and so is a source whose output does not move with the seed. The port maps the source's parameters onto
its inputs by SOURCE_PARAMS (README: "Porting PyTorch sources").
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from maxkernel.tpu_tools.errors import ReferenceFailure, UsageError
from maxkernel.tpu_tools.judge.compare import compare_outputs, trivial_outputs_passing, within
from maxkernel.tpu_tools.port.report import PortCheck
from maxkernel.tpu_tools.port.source import SourceFailure, TorchSource, forward
from maxkernel.tpu_tools.problem.tolerances import choose_tolerance
from maxkernel.tpu_tools.reports import SeedResult, Tolerance

CHECK_SIZE = "full"  # the source's own shape: the only one its get_inputs/get_init_inputs fix


class BadPort(Exception):
    """The port cannot be run against the source (its inputs, SOURCE_PARAMS or outputs do not line up)."""


def source_params(source: TorchSource, module: Any) -> list[str]:
    """The port's declared SOURCE_PARAMS, else every parameter then every float buffer of the source."""
    declared = getattr(module, "SOURCE_PARAMS", None)
    if declared is not None:
        return list(declared)
    names = [n for n, _ in source.model.named_parameters()]
    return names + [n for n, b in source.model.named_buffers() if b.is_floating_point()]


def read_params(program: Any) -> set[str]:
    """The parameters and float buffers the exported forward reads (unread ones need not be inputs)."""
    from torch.export.graph_signature import InputKind

    used = {n.name for n in program.graph.nodes if n.op == "placeholder" and n.users}
    return {
        s.target
        for s in program.graph_signature.input_specs
        if s.kind in (InputKind.PARAMETER, InputKind.BUFFER) and s.arg.name in used
    }


ZERO_INIT_MIN_STD = 1e-2  # a zero-initialised parameter (a bias) is drawn at least this wide


def scale_problem(name: str, arr: np.ndarray, source: np.ndarray) -> str | None:
    """Why the port's draw of `name` is off the source's scale (10x either way), or None.

    A draw far below the source's scale can hide a missing term (a weight at 1e-8 makes x @ w vanish, so a
    port that drops the matmul passes); far above, it can swamp one.
    """
    a = arr.astype(np.float64)
    s, ref = float(a.std()), float(source.std())
    if ref > 0:
        if not 0.1 <= s / ref <= 10:
            return f"the port draws {name} at std {s:.3g}; the source's has {ref:.3g} (more than 10x off)"
        return None
    m, ref_m = float(np.abs(a).mean()), float(np.abs(source).mean())
    if ref_m > 0 and not 0.1 <= m / ref_m <= 10:
        return f"the port draws {name} at mean |x| {m:.3g}; the source's constant is {ref_m:.3g} (more than 10x off)"
    if ref_m == 0 and s < ZERO_INIT_MIN_STD:
        return f"the port draws {name} at std {s:.3g}; a zero-initialised parameter is drawn at std >= {ZERO_INIT_MIN_STD:g}"
    return None


def to_numpy(x: Any) -> np.ndarray:
    arr = np.asarray(x)
    return arr.astype(np.float32) if arr.dtype.name == "bfloat16" else arr


def to_torch(arr: np.ndarray, like: Any) -> Any:
    """The port's value as a tensor of the source's dtype: exact (f32 -> f64, int32 -> int64 widen)."""
    import torch

    return torch.from_numpy(np.array(arr, copy=True)).to(like.dtype)


def torch_to_numpy(t: Any) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def _load_port(port: str):
    from maxkernel.tpu_tools.problem.reference import load_reference
    from maxkernel.tpu_tools.problem.source import import_file

    ref = load_reference(port)
    module, _ = import_file(Path(port), "reference")  # the same bytes load_reference ran (cached by hash)
    return ref, module


def _make_inputs(ref: Any, module: Any, seed: int, size: str = CHECK_SIZE) -> tuple:
    """create_inputs at the check size for this seed: jitted (one compile, not one per op) where it traces."""
    import jax

    try:
        fn = jax.jit(lambda k: tuple(module.create_inputs(key=k, size=size)))
        return fn(jax.random.key(seed))
    except Exception:  # an int-seed or untraceable create_inputs: the reference loader's own call
        return tuple(ref.create_inputs(size, seed))


def compare(
    seed: int,
    expected: list[np.ndarray],
    actual: list[np.ndarray],
    activations: list[np.ndarray],
    tol: Tolerance,
    oracle: list[np.ndarray] | None = None,
) -> SeedResult:
    """The port's outputs against the source's for one run: the numerics rule and the weak-check guard in
    one place (validate's rule, judge/compare.py). With `oracle` (the source run wider), the error rule
    (judge/error_rule.py) also applies: the port within 2x the source's own error against it passes."""
    refs = None
    if oracle is not None:
        from maxkernel.tpu_tools.judge.error_rule import reference_error

        refs = [reference_error(o, e) for o, e in zip(oracle, expected, strict=True)]
    dtypes = [str(e.dtype) for e in expected]
    result = compare_outputs(seed, expected, actual, tol, oracle, refs, dtypes)
    trivial = trivial_outputs_passing(expected, activations, tol, oracle, refs, dtypes)
    if all(np.size(e) <= 1 for e in expected):  # a scalar (a loss): its own mean is itself, says nothing
        trivial = [t for t in trivial if t != "reference mean"]
    result.trivial_outputs_passing = trivial
    return result


def scalar_guard(
    runs: list[tuple[list[np.ndarray], list[np.ndarray]]],
    tol: Tolerance,
    locate: Callable[[list[np.ndarray], Tolerance], str | None] | None,
) -> tuple[str | None, str | None, str]:
    """For a port whose every output is a scalar (a loss), whether the check can tell it apart from a
    constant: (first op off, weak reason, note). A port this tool wrote is compared statement by statement
    on the last seed's inputs (every intermediate, not only the scalar); a given port is weak where the
    outputs' mean over the seeds passes every seed."""
    if locate is not None:
        off = locate(runs[-1][0], tol)
        return off, None, "; every intermediate matched too (a scalar output)" if off is None else ""
    means = [np.mean([np.asarray(e[i], np.float64) for _, e in runs], axis=0) for i in range(len(runs[0][1]))]
    if all(bool(within(e, m, tol).all()) for _, exp in runs for e, m in zip(exp, means, strict=True)):
        return None, "a constant (the outputs' mean over the seeds) also passes every seed", ""
    return None, None, ""


def _refuse(status: str, summary: str, offset: int, **kw: Any) -> PortCheck:
    kw.setdefault("size", CHECK_SIZE)
    return PortCheck(ok=False, status=status, summary=summary, seed_offset=offset, **kw)


def check_port(
    source: TorchSource,
    port: str,
    *,
    seeds: int = 3,
    seed_offset: int | None = None,
    allow_weak_check: bool = False,
    required_params: set[str] | None = None,
    locate: Callable[[list[np.ndarray], Tolerance], str | None] | None = None,
    at: str = CHECK_SIZE,
    sources: dict[str, TorchSource] | None = None,
) -> PortCheck:
    """The port against the source over `seeds` fresh seeds at size `at` (the source's own shape where
    the host holds it), plus one at `small`. `sources`: the source built at each size (its size globals
    scaled); a size without one runs on `source` (only its batch may differ)."""
    offset = random.randrange(1 << 30) if seed_offset is None else seed_offset
    ref, module = _load_port(port)
    sources = dict(sources or {})

    def refuse(status: str, summary: str, offset: int, **kw: Any) -> PortCheck:
        return _refuse(status, summary, offset, size=at, **kw)

    if CHECK_SIZE not in ref.info.sizes:
        raise UsageError(
            f"port {port}: SIZES has no 'full' (the source's own shape); it has {ref.info.sizes}"
        )
    if at not in ref.info.sizes:
        raise UsageError(
            f"port {port}: the source's own shape is too big to check on this host and SIZES has no "
            f"{at!r} entry (it has {ref.info.sizes})"
        )
    names = source_params(source, module)
    state = dict(source.model.named_parameters()) | dict(source.model.named_buffers())
    unknown = [n for n in names if n not in state]
    if unknown:
        return refuse("bad_port", f"SOURCE_PARAMS names {unknown} that the source does not have", offset)
    missing = sorted((required_params or set()) - set(names))
    missing = [n for n in missing if state[n].is_floating_point()]
    if missing:
        return refuse(
            "bad_port",
            f"the port does not take the source's {', '.join(missing)}: they would stay fixed; "
            "add them to SOURCE_PARAMS and create_inputs",
            offset,
            source_params=names,
        )
    positions = source.tensor_positions
    # the source's own values, before any run overwrites them: the scale each port draw must keep
    init = {n: state[n].detach().double().numpy().copy() for n in names if state[n].is_floating_point()}
    per_seed: list[SeedResult] = []
    tol: Tolerance | None = None
    previous: dict[str, np.ndarray] = {}
    expected_first: list[np.ndarray] | None = None
    moved = False
    worst_inputs: list[np.ndarray] | None = None
    worst_score = -1.0
    run_sizes: list[str] = []
    at_runs: list[tuple[list[np.ndarray], list[np.ndarray]]] = []  # (inputs, source outputs) per seed at `at`
    runs = [(at, seed) for seed in range(offset, offset + seeds)]
    if "small" in ref.info.sizes and ref.sizes_table.get("small") != ref.sizes_table.get(at):
        runs.append(
            ("small", offset)
        )  # the size validation runs kernels at: the port must be right there too
    try:
        for size, seed in runs:
            try:
                made = _make_inputs(ref, module, seed, size)
                inputs = [to_numpy(x) for x in made]
            except ReferenceFailure:
                raise
            except Exception as e:
                raise BadPort(f"create_inputs fails at seed {seed}: {type(e).__name__}: {e}") from None
            if len(inputs) != len(positions) + len(names):
                raise BadPort(
                    f"create_inputs gives {len(inputs)} inputs; the source takes {len(positions)} "
                    f"activations and SOURCE_PARAMS names {len(names)} parameters"
                )
            src = sources.get(size, source)
            exact = size == at or size in sources
            src_state = dict(src.model.named_parameters()) | dict(src.model.named_buffers())
            call = list(src.inputs)
            for k, pos in enumerate(positions):
                want = tuple(src.inputs[pos].shape)
                got = inputs[k].shape
                if got != want if exact else (len(got) != len(want) or got[1:] != want[1:]):
                    raise BadPort(f"input {k} is {got} in the port at {size!r}, {want} in the source")
                sample = src.input_samples.get(pos)
                if size == at and sample is not None and sample.is_floating_point():
                    if (off := scale_problem(f"input {k}", inputs[k], sample.double().numpy())) is not None:
                        raise BadPort(off)
                call[pos] = to_torch(inputs[k], src.inputs[pos])
            import torch

            with torch.no_grad():
                for name, arr in zip(names, inputs[len(positions) :], strict=True):
                    t = src_state[name]
                    if tuple(t.shape) != arr.shape:
                        raise BadPort(f"{name} is {tuple(t.shape)} in the source, {arr.shape} in the port")
                    if t.is_floating_point():
                        if not np.any(arr):
                            raise BadPort(f"the port draws {name} as all zeros (seed {seed})")
                        if arr.size > 1 and np.all(arr == arr.flat[0]):
                            raise BadPort(f"the port draws {name} as one constant (seed {seed})")
                        if size == at and (off := scale_problem(name, arr, init[name])) is not None:
                            raise BadPort(off)
                        if size == at and name in previous and np.array_equal(previous[name], arr):
                            raise BadPort(f"the port's {name} does not vary with the seed")
                    if size == at:
                        previous[name] = arr
                    t.copy_(to_torch(arr, t))
            try:
                expected = [torch_to_numpy(t) for t in forward(src, call)]
            except Exception as e:
                from maxkernel.tpu_tools.problem.source import user_frame_line

                if size != at:  # the source runs at the check size: the port's smaller size is wrong
                    raise BadPort(
                        f"the source cannot run at the port's {size!r} size {ref.sizes_table.get(size)}: "
                        f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
                    ) from None

                line = user_frame_line(e.__traceback__, source.path)
                raise SourceFailure(
                    f"the source fails on its own in forward{f' at line {line}' if line else ''}: "
                    f"{type(e).__name__}: {e}",
                    line=line,
                ) from None
            try:
                import jax

                out = jax.jit(ref.workload)(*made)
                actual = [to_numpy(a) for a in jax.tree_util.tree_leaves(out)]
            except Exception as e:
                first = (str(e).strip().splitlines() or [""])[0][:300]
                raise BadPort(
                    f"the port's workload fails at {size!r}, seed {seed}: {type(e).__name__}: {first}"
                ) from None
            if [a.shape for a in actual] != [e.shape for e in expected]:
                raise BadPort(
                    f"the port returns shapes {[a.shape for a in actual]}, the source "
                    f"{[e.shape for e in expected]}"
                )
            if tol is None:
                cfg = ref.config
                tol = choose_tolerance(
                    str(actual[0].dtype), ref_atol=cfg.get("atol"), ref_rtol=cfg.get("rtol")
                )
            result = compare(seed, expected, actual, inputs[: len(positions)], tol)
            per_seed.append(result)
            run_sizes.append(size)
            if size == at:
                at_runs.append((inputs, expected))
            if size != at:
                pass
            elif expected_first is None:
                expected_first = expected
            elif any(not np.array_equal(a, b) for a, b in zip(expected_first, expected, strict=True)):
                moved = True
            score = result.mismatch_fraction or 0.0
            if not result.ok and score > worst_score:
                worst_score, worst_inputs = score, inputs
    except BadPort as e:
        return refuse(
            "bad_port",
            f"{e}",
            offset,
            per_seed=per_seed,
            per_seed_size=run_sizes,
            tolerance=tol,
            source_params=names,
        )
    except ReferenceFailure as e:
        return refuse(
            "bad_port",
            f"the port fails on its own: {e}",
            offset,
            per_seed=per_seed,
            per_seed_size=run_sizes,
            source_params=names,
        )
    bad = [r for r in per_seed if not r.ok]
    common = dict(per_seed=per_seed, per_seed_size=run_sizes, tolerance=tol, source_params=names)
    if bad:
        r = max(bad, key=lambda r: r.mismatch_fraction or 0.0)
        at = run_sizes[per_seed.index(r)]
        where = None
        if locate is not None and worst_inputs is not None and tol is not None:
            where = locate(worst_inputs, tol)
        worst = (
            f"output{r.worst_index} is {r.worst_actual:.6g} in the port, {r.worst_expected:.6g} in the source"
            if r.worst_index is not None and r.worst_actual is not None
            else "outputs differ"
        )
        summary = (
            f"the port does not match the source: {len(bad)}/{len(per_seed)} runs fail; {at!r} seed {r.seed}: "
            f"{worst} ({100 * (r.mismatch_fraction or 0):.3g}% of elements outside atol={tol.atol:g} "
            f"rtol={tol.rtol:g}, max abs err {r.max_abs_err:.3g})"
            + (f"; first op off: {where}" if where else "")
        )
        return refuse("mismatch", summary, offset, worst_op=where, **common)
    weak = all(r.trivial_outputs_passing for r in per_seed)
    scalar_note, scalar_weak = "", None
    if at_runs and all(np.size(e) <= 1 for e in at_runs[0][1]):
        off, scalar_weak, scalar_note = scalar_guard(at_runs, tol, locate)
        if off is not None:
            return refuse(
                "mismatch",
                f"the port's scalar output matches the source but an intermediate does not: first op off: {off}",
                offset,
                worst_op=off,
                **common,
            )
    if (weak or not moved or scalar_weak) and not allow_weak_check:
        why = (
            f"a trivial output ({', '.join(per_seed[0].trivial_outputs_passing)}) also passes every seed"
            if weak
            else scalar_weak
            if scalar_weak
            else f"the source's output is the same for all {len(per_seed)} seeds"
        )
        return refuse(
            "weak_check", f"the check cannot tell: {why} (--allow-weak-check accepts)", offset, **common
        )
    return PortCheck(
        ok=True,
        status="match",
        summary=(
            f"the port matches the source on {seeds} fresh seeds (offset {offset}) "
            + ("at its own shape" if at == CHECK_SIZE else f"at {at!r} {ref.sizes_table.get(at)}")
            + (f" and 1 at 'small' {ref.sizes_table.get('small')}" if len(runs) > seeds else "")
            + ": "
            f"max abs err {max(r.max_abs_err or 0 for r in per_seed):.3g} within atol={tol.atol:g} "
            f"rtol={tol.rtol:g} ({tol.source})" + scalar_note
        ),
        size=at,
        seed_offset=offset,
        **common,
    )


def first_op_off(expected: dict[str, np.ndarray], actual: dict[str, np.ndarray], order: list[tuple[str, str]],
                 tol: Tolerance) -> str | None:  # fmt: skip
    """The first statement (in graph order) whose port value leaves the tolerance of the source's."""
    for var, label in order:
        e, a = expected.get(var), actual.get(var)
        if e is None or a is None or np.shape(e) != np.shape(a):
            continue
        if not within(np.asarray(e), np.asarray(a), tol).all():
            return label
    return None
