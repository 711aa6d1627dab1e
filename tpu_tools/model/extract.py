"""One region of a model step as a standalone reference file, checked by splicing it back.

The region's equations are re-emitted as plain JAX by the shared emitter (problem/emit.py, mosaic=False:
every equation as traced, so the file computes what the model computes, bit for bit). SIZES holds the
model's sizes: `full` at the model's production shapes, `small` at its small size (the model's own small
shapes keep whatever divisibility they had), and `derived` at the model's derived check size where it has
one (the model's dims grown past small to non-multiples: the region's default check sizes are then small
and derived, as for any reference; a region's SIZES are shapes, not dims, so it could not derive its own). create_inputs draws each input like the model
feeds it: mean, standard deviation and range of each float input (the fraction true of a mask, the
range of an integer) recorded at small size on CPU over every instance of the region, then reproduced.
The tolerance comes from the outputs' dtype. On creation the file is loaded and spliced back into the
model at small size in place of every instance of the region: the model's outputs must be bit-identical,
and the full body must give the region's full output shapes; else nothing is written.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.errors import MaxkernelError, ReferenceFailure, UsageError
from maxkernel.tpu_tools.problem.sizes import DERIVED
from maxkernel.tpu_tools.reports import Tolerance

SEED = 0  # the model inputs the statistics and the splice check use


class ExtractFailure(MaxkernelError):
    """The extracted file did not reproduce the model (our fault, not the caller's): nothing written."""


class InputStat(BaseModel):
    name: str
    dtype: str
    shape_full: list[int]
    shape_small: list[int]
    kind: Literal["float", "int", "bool"]
    mean: float = 0.0
    std: float = 0.0
    min: float = 0.0
    max: float = 0.0
    p_true: float = 0.0


class ExtractReport(BaseModel):
    kind: Literal["extract"] = "extract"
    model: str
    region: str
    region_name: str
    count: int = Field(description="instances of the region in the step (every one spliced)")
    path: str
    equations: int = Field(description="equations in one instance at full size")
    inputs: list[InputStat]
    outputs: list[str] = Field(description="dtype[shape] of each output at full size")
    tolerance: Tolerance
    checks: list[str] = Field(description="what was checked on creation, each from what ran")


def _find(merged, rid: str, model: str, size: str):
    from maxkernel.tpu_tools.model.regions import matching_id

    found = matching_id([reg.id for reg in merged], rid)
    for reg in merged:
        if reg.id == found:
            return reg
    known = ", ".join(r.id for r in merged)
    raise UsageError(f"no region {rid!r} in {model} (size {size}); its regions are: {known}")


def _trace(ref, size: str):
    from maxkernel.tpu_tools.model import regions as regions_mod
    from maxkernel.tpu_tools.model.flat import flatten

    try:
        flat = flatten(ref.workload, ref.input_shapes(size), name=ref.info.name, size=size)
    except Exception as e:
        raise UsageError(
            f"model {ref.info.name!r} does not trace: {type(e).__name__}: {str(e)[:300]}"
        ) from None
    insts = regions_mod.instances(flat)
    return flat, insts, regions_mod.merge(flat, insts)


_MODEL_CACHE: dict[tuple, tuple] = {}


def _model_at(ref, size: str):
    """The model traced at `size` and run once under jit (seed SEED) with every region instance's inputs
    recorded: (flat, instances, regions, inputs, outputs, {instance: its input values}). One compiled run,
    not the step op by op (a tiny Gemma 2 took 110 s eagerly on CPU). Cached per file version."""
    import jax

    from maxkernel.tpu_tools.model.flat import Replacement, evaluate, range_fn

    key = (ref.info.path, os.path.getmtime(ref.info.path) if os.path.exists(ref.info.path) else 0, size)
    if key in _MODEL_CACHE:
        return _MODEL_CACHE[key]
    flat, insts, merged = _trace(ref, size)
    leaves = jax.tree_util.tree_leaves(ref.create_inputs(size, SEED))

    def recorded(*xs):
        seen: dict[int, list[Any]] = {}

        def recorder(inst):
            fn = range_fn(flat, inst.start, inst.stop, inst.inputs, inst.outputs)

            def run(*vals):
                seen[inst.index] = list(vals)
                return fn(*vals)

            return run

        reps = [Replacement(i.start, i.stop, tuple(i.inputs), tuple(i.outputs), recorder(i)) for i in insts]
        return evaluate(flat, xs, replace=reps), seen

    expected, seen = jax.jit(recorded)(*leaves)
    seen = {int(k): v for k, v in seen.items()}
    for other in [k for k in _MODEL_CACHE if k[:2] != key[:2]]:
        del _MODEL_CACHE[
            other
        ]  # one model at a time (its sizes together): its arrays are small, models add up
    _MODEL_CACHE[key] = (flat, insts, merged, leaves, expected, seen)
    return _MODEL_CACHE[key]


def _stat(name: str, vals: list[Any], full_spec, small_spec) -> InputStat:
    import numpy as np

    a = np.concatenate([np.asarray(v, dtype=np.float64 if v.dtype != bool else bool).ravel() for v in vals])
    base = dict(name=name, dtype=small_spec.dtype, shape_full=full_spec.shape, shape_small=small_spec.shape)
    if small_spec.dtype == "bool":
        return InputStat(**base, kind="bool", p_true=float(a.mean()) if a.size else 0.0)
    kind = "int" if "int" in small_spec.dtype else "float"
    if not a.size:
        return InputStat(**base, kind=kind)
    return InputStat(
        **base, kind=kind, mean=float(a.mean()), std=float(a.std()), min=float(a.min()), max=float(a.max())
    )


def _body(flat, inst, fn_name: str) -> list[str]:
    from maxkernel.tpu_tools.problem.emit import body_lines, unsupported_ops

    eqns = flat.equations[inst.start : inst.stop]
    program = {"equations": [e.model_dump() for e in eqns], "census": {e.primitive: 1 for e in eqns}}
    bad = unsupported_ops(program, mosaic=False)
    if bad:
        raise ExtractFailure(f"the emitter has no plain-JAX form for {', '.join(bad)}")
    lines = [f"def {fn_name}({', '.join(inst.inputs)}):"]
    lines += ["    " + ln for ln in body_lines(program, mosaic=False)]
    outs = ", ".join(o[4:] if o.startswith("lit:") else o for o in inst.outputs)
    lines.append(f"    return ({outs},)")
    return lines


# A mask, a position or an index input is kept as the model built it (recorded at the check sizes) up to
# this many elements; past it (a huge mask), it is drawn from its statistics like a float.
RECORD_MAX_ELEMENTS = 1 << 22


def _encode(value) -> str:
    """A bool or integer array as compressed text (bools packed to bits)."""
    import base64
    import zlib

    import numpy as np

    a = np.asarray(value)
    raw = np.packbits(a.ravel()).tobytes() if a.dtype == bool else np.ascontiguousarray(a).tobytes()
    return base64.b64encode(zlib.compress(raw, 9)).decode()


def _recorded(stats, values_by_size: dict[str, list[Any]]) -> dict[str, dict[int, str]]:
    """{size: {input index: encoded value}} for the bool and int inputs small enough to keep."""
    import math

    out: dict[str, dict[int, str]] = {}
    for size, vals in values_by_size.items():
        keep = {
            j: _encode(v)
            for j, (st, v) in enumerate(zip(stats, vals, strict=True))
            if st.kind in ("bool", "int") and math.prod(v.shape) <= RECORD_MAX_ELEMENTS
        }
        if keep:
            out[size] = keep
    return out


def _source(
    ref, reg, inst_full, inst_small, flat_full, flat_small, stats, tol, flops, derived=None, recorded=None
) -> str:
    """The file's text; `derived`: (instance, flat, input shapes) at the model's derived size, or None;
    `recorded`: {size: {input index: encoded value}} of the masks, positions and indices the model built."""
    full = [[s.shape_full, s.dtype] for s in stats]
    small = [[s.shape_small, s.dtype] for s in stats]
    extra = (
        f'\n    "derived": {{"inputs": {[[sh, s.dtype] for sh, s in zip(derived[2], stats, strict=True)]!r}}},'
        if derived
        else ""
    )
    origin = "\n".join(f"#   {o}" for o in reg.origin[:12])
    head = f'''"""Region {reg.id!r} of model {ref.info.name!r} ({reg.kind}, x{reg.count} in the step), extracted
by `maxkernel extract`: its equations re-emitted as plain JAX, inputs drawn like the model feeds them."""
# Where it comes from:
{origin}

import base64
import math
import zlib

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

CONFIG = {{
    "name": {f"{ref.info.name}.{reg.id}"!r},
    "model": {ref.info.name!r},
    "operator": {reg.kind!r},
    "atol": {tol.atol!r},
    "rtol": {tol.rtol!r},
}}
SIZES = {{
    "full": {{"inputs": {full!r}}},
    "small": {{"inputs": {small!r}}},{extra}
}}
# Recorded at size small over every instance of the region in the model (seed {SEED}).
STATS = {[s.model_dump(include={"name", "kind", "mean", "std", "min", "max", "p_true"}) for s in stats]!r}
FLOPS = {flops!r}


# The masks, positions and indices the model built at the check sizes (recorded from its forward, seed {SEED}):
# kept as they are for every seed (their form is the structure a kernel relies on); the floats vary by seed.
RECORDED = {recorded or {}!r}


def _decode(text, shape, dt):
    raw = zlib.decompress(base64.b64decode(text))
    if dt == "bool":
        return jnp.asarray(np.unpackbits(np.frombuffer(raw, np.uint8), count=math.prod(shape)).astype(bool).reshape(shape))
    return jnp.asarray(np.frombuffer(raw, np.dtype(dt)).reshape(shape))


def create_inputs(dtype=None, *, key=None, size="full"):
    key = jax.random.key(0) if key is None else key
    keys = jax.random.split(key, max(1, len(STATS)))
    out = []
    for j, (k, (shape, dt), st) in enumerate(zip(keys, SIZES[size]["inputs"], STATS)):
        if j in RECORDED.get(size, {{}}):
            x = _decode(RECORDED[size][j], tuple(shape), dt)
        elif st["kind"] == "bool":
            x = jax.random.bernoulli(k, st["p_true"], tuple(shape))
        elif st["kind"] == "int":
            x = jax.random.randint(k, tuple(shape), int(st["min"]), int(st["max"]) + 1, jnp.dtype(dt))
        else:
            z = jax.random.normal(k, tuple(shape), jnp.float32)
            if st["std"] > 0:
                x = jnp.clip(st["mean"] + st["std"] * z, st["min"], st["max"])
            else:  # one constant in the model (a bias or scale at its init): never drawn without spread
                x = st["mean"] + max(0.1, 0.1 * abs(st["mean"])) * z
            x = x.astype(dtype or jnp.dtype(dt))
        out.append(x)
    return tuple(out)


def get_flops(size="full"):
    return FLOPS[size]


'''
    full_body = _body(flat_full, inst_full, "region_full")
    small_body = _body(flat_small, inst_small, "region_small")
    if derived:
        small_body += ["", "", *_body(derived[1], derived[0], "region_derived")]
    tail = '''

_BODIES = {
    tuple(tuple(s) for s, _ in SIZES["full"]["inputs"]): region_full,
    tuple(tuple(s) for s, _ in SIZES["small"]["inputs"]): region_small,
}
if "derived" in SIZES:
    _BODIES[tuple(tuple(s) for s, _ in SIZES["derived"]["inputs"])] = region_derived


def workload(*inputs):
    """The region's outputs (a tuple, in the model's order)."""
    return _BODIES[tuple(tuple(x.shape) for x in inputs)](*inputs)
'''
    return head + "\n".join(full_body) + "\n\n\n" + "\n".join(small_body) + "\n" + tail


def _same_bits(a, b) -> bool:
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def extract_region(reference: str, region_id: str) -> tuple[ExtractReport, str]:
    """Region `region_id` of `reference` as reference source, checked by splicing (in a pool child: the
    model is user code). The caller writes the file (write_new); the report's path is filled then."""
    import jax

    from maxkernel.tpu_tools.model.regions import _specs
    from maxkernel.tpu_tools.pool.child import report_progress
    from maxkernel.tpu_tools.problem.reference import load_reference
    from maxkernel.tpu_tools.problem.tolerances import default_tolerance

    try:
        ref = load_reference(reference)
    except ReferenceFailure as e:
        raise UsageError(str(e)) from None
    sizes = ref.info.sizes
    big, small = ("full" if "full" in sizes else sizes[0]), ("small" if "small" in sizes else sizes[0])
    report_progress(f"trace {ref.info.name} at size {big}")
    flat_f, insts_f, merged_f = _trace(ref, big)
    reg_f = _find(merged_f, region_id, ref.info.name, big)  # an unknown id fails before the model runs
    report_progress(
        f"{region_id}: {reg_f.count} instance(s), {len(flat_f.equations)} equations in the step; run the model "
        f"at size {small} to record the region's inputs"
    )
    flat_s, insts_s, merged_s, _, _, seen = _model_at(ref, small)
    reg_s = _find(merged_s, region_id, ref.info.name, small)
    inst_s, inst_f = insts_s[reg_s.instances[0]], insts_f[reg_f.instances[0]]
    if len(inst_s.inputs) != len(inst_f.inputs) or len(inst_s.outputs) != len(inst_f.outputs):
        raise ExtractFailure(f"region {region_id!r} reads or makes different values at {big} and {small}")
    spec_s, spec_f = _specs(flat_s), _specs(flat_f)
    stats = [
        _stat(f"in{j}", [seen[k][j] for k in reg_s.instances], spec_f[n_f], spec_s[n_s])
        for j, (n_s, n_f) in enumerate(zip(inst_s.inputs, inst_f.inputs, strict=True))
    ]
    out_specs_f = [spec_f[o] for o in inst_f.outputs]
    floats = [s.dtype for s in out_specs_f if "float" in s.dtype]
    widest = sorted(floats, key=lambda d: default_tolerance(d).atol)[-1] if floats else out_specs_f[0].dtype
    tol = default_tolerance(widest)
    flops = {big: reg_f.flops, small: reg_s.flops}
    checks: list[str] = []
    report_progress("run the model at its derived check size")
    derived, at_derived = _at_derived(ref, region_id, inst_s)
    if derived is not None:
        flops[DERIVED] = at_derived.flops
    values = {small: seen[reg_s.instances[0]]}
    if derived is not None:
        values[DERIVED] = _model_at(ref, DERIVED)[5][derived[0].index]
    text = _source(
        ref, reg_f, inst_f, inst_s, flat_f, flat_s, stats, tol, flops, derived, _recorded(stats, values)
    )
    fd, tmp = tempfile.mkstemp(prefix="extract-", suffix=".py")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        try:
            mod = load_reference(tmp)
        except ReferenceFailure as e:
            raise ExtractFailure(f"the extracted file does not load: {e}") from None
        n_checks = 2 if derived is not None else 1
        report_progress(
            f"splice check 1/{n_checks}: the extracted region at size {small} on the model's inputs"
        )
        checks.append(_splice_check(ref, region_id, mod.workload, small))
        if derived is not None:
            report_progress(
                f"splice check 2/{n_checks}: the extracted region at size {DERIVED} on the model's inputs"
            )
            checks.append(_splice_check(ref, region_id, mod.workload, DERIVED))
        else:
            checks.append(f"no derived check size: {at_derived}")
        shapes = jax.eval_shape(mod.workload, *mod.input_shapes(big))
        got = [f"{s.dtype}{list(s.shape)}" for s in jax.tree_util.tree_leaves(shapes)]
        want = [f"{s.dtype}{list(s.shape)}" for s in out_specs_f]
        if got != want:
            raise ExtractFailure(f"at {big} the extracted region gives {got}, the model's region {want}")
        checks.append(f"at size {big} it traces to the region's output shapes {', '.join(want)}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return ExtractReport(
        model=ref.info.name,
        region=reg_f.id,
        region_name=reg_f.name,
        count=reg_f.count,
        path="",
        equations=inst_f.stop - inst_f.start,
        inputs=stats,
        outputs=[f"{s.dtype}{list(s.shape)}" for s in out_specs_f],
        tolerance=tol,
        checks=checks,
    ), text


def _at_derived(ref, region_id: str, inst_small):
    """((instance, flat, input shapes), region) at the model's derived size, or (None, why not)."""
    from maxkernel.tpu_tools.model.regions import _specs

    derived = ref.derived_size()
    if not derived.ok:
        return None, derived.describe()
    try:
        flat_d, insts_d, merged_d, *_ = _model_at(ref, DERIVED)  # traced and run once: the splice reuses it
        reg_d = _find(merged_d, region_id, ref.info.name, DERIVED)
    except (UsageError, ExtractFailure) as e:
        return None, f"at the model's derived size the region is not found: {e}"
    inst_d = insts_d[reg_d.instances[0]]
    if len(inst_d.inputs) != len(inst_small.inputs) or len(inst_d.outputs) != len(inst_small.outputs):
        return None, "the region reads or makes different values at the model's derived size"
    spec_d = _specs(flat_d)
    return (inst_d, flat_d, [list(spec_d[n].shape) for n in inst_d.inputs]), reg_d


def _splice_check(ref, region_id: str, workload, size: str) -> str:
    """The extracted workload in place of every instance of the region, on the inputs the model fed each one
    at `size`: bit-identical to the model's own equations for the region, or raise. The region alone, not
    the whole model (equivalent: the rest of the step is the same function of the region's outputs), both
    sides run the same way (op by op)."""
    from maxkernel.tpu_tools.model.flat import range_fn

    flat, insts, merged, _, _, seen = _model_at(ref, size)
    reg = _find(merged, region_id, ref.info.name, size)
    n_out = 0
    for k in reg.instances:
        inst = insts[k]
        want = range_fn(flat, inst.start, inst.stop, inst.inputs, inst.outputs)(*seen[k])
        got = workload(*seen[k])
        got = list(got) if isinstance(got, (list, tuple)) else [got]
        same = len(got) == len(want) and all(_same_bits(a, b) for a, b in zip(got, want, strict=False))
        if not same:
            bad = [j for j, (a, b) in enumerate(zip(got, want, strict=False)) if not _same_bits(a, b)]
            raise ExtractFailure(
                f"spliced back at {size} in place of instance {k} ({inst.name}), the region's outputs "
                f"{bad or 'count'} differ from the original"
            )
        n_out = len(want)
    where = f"at its {size} size {ref.check_size(size).dims}" if size == DERIVED else f"at size {size}"
    return (
        f"spliced back into {ref.info.name} {where} (seed {SEED}) in place of all {reg.count} instance(s), each "
        f"on the inputs the model fed it: its {n_out} output(s) are bit-identical to the model's region"
    )


def write_new(path: str | Path, text: str) -> Path:
    """Write `text` to a new file `path` atomically; UsageError when it exists (nothing overwritten)."""
    out = Path(path)
    if out.exists():
        raise UsageError(f"{out} exists; extract writes a new file")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".extract-", suffix=".py", dir=out.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, out)
    return out.resolve()


def extract_job(reference: str, region: str) -> dict[str, Any]:
    """Pool job: the ExtractReport as JSON and the source, or {"error": ...} (the caller's mistake or a
    failed check)."""
    try:
        report, text = extract_region(reference, region)
        return {"report": report.model_dump(mode="json"), "source": text}
    except (UsageError, ExtractFailure) as e:
        return {"error": str(e)}


def extract_in_child(
    evaluator: Any,
    reference: str,
    region: str,
    out_path: str,
    *,
    timeout_s: float | None = None,
    on_progress: Any = None,
    cancel: Any = None,
) -> ExtractReport:
    """Run `extract_region` in a pool child (the model is user code) and write its file here (`out_path`,
    new); UsageError for what went wrong, and then nothing is written."""
    from maxkernel.tpu_tools.judge.outcomes import abs_reference

    if on_progress:
        on_progress(f"trace, extract and splice back {region}")
    outcome = evaluator._run(
        "maxkernel.tpu_tools.model.extract:extract_job",
        {"reference": abs_reference(reference), "region": region},
        timeout_s=timeout_s,
        on_progress=on_progress,
        cancel=cancel,
    )
    if outcome.status != "ok" or outcome.result is None:
        raise UsageError(
            f"extract of {region} from {reference} ended with {outcome.status}: {outcome.message}"
        )
    if "error" in outcome.result:
        raise UsageError(outcome.result["error"])
    report = ExtractReport.model_validate(outcome.result["report"])
    report.path = str(write_new(out_path, outcome.result["source"]))
    return report
