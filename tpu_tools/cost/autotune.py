"""Sweep a kernel template's tunables: prune before running, then compile and validate the best-ranked.

A template is source text with `${name}` placeholders. Every point of the space is rendered, then
pruned without compiling: render errors, the caller's legality check, a trace at the reference's
shapes that fails, blocks breaking the (8,128) layout rule, and VMEM need over the chip's VMEM or the
kernel's scoped limit. The survivors are ranked by the static estimate (labeled `estimate`), and the
top `max_configs` go through the Evaluator (compile, validate; profile when the chip is present and
the objective is `measured`). Failures are kept as data on each config, never raised.
"""

from __future__ import annotations

import itertools
import json
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from string import Template
from typing import Any, Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.hardware.targets import estimate_chip
from maxkernel.tpu_tools.judge.evaluate import Evaluator, ProgressFn
from maxkernel.tpu_tools.pool.workers import JobOutcome

MAX_SPACE = 4096
MIN_PER_PART = 4  # configs per estimate child at least: each child pays a jax start-up
Status = Literal["pruned", "not_run", "compile_failed", "invalid", "valid"]
Objective = Literal["estimate", "measured"]
CheckFn = Callable[[dict[str, Any]], Sequence[str]]


class ConfigResult(BaseModel):
    """One point of the space and how far it got."""

    config: dict[str, Any]
    status: Status
    pruned_reason: str | None = Field(default=None, description="render|illegal|trace|layout|vmem|duplicate")
    estimate_us: float | None = Field(default=None, description="static estimate (an estimate, not a timing)")
    estimate_bound: str | None = None
    vmem_bytes_needed: int | None = None
    compile_ok: bool | None = None
    validate_ok: bool | None = None
    measured_median_ms: float | None = Field(
        default=None, description="native timing on the chip, if present"
    )
    failure: str | None = Field(default=None, description="why it was pruned or failed")
    kernel_path: str | None = None


class AutotuneReport(BaseModel):
    """The sweep's verdict: every config's result, the best valid one, and why the rest were dropped."""

    kind: Literal["estimate", "measured"] = Field(description="what ranked `best`")
    reference: str
    target: str
    size: str
    check_sizes: list[str] | None = Field(
        default=None, description="where each config was validated; None: small plus the derived size"
    )
    objective: Objective
    space_size: int
    configs: list[ConfigResult]
    best: ConfigResult | None = None
    pruned: dict[str, int] = Field(default_factory=dict, description="reason -> count, before anything ran")
    evaluated: int = Field(description="configs compiled (and validated when they compiled)")
    notes: list[str] = Field(default_factory=list)


# Static estimates already made in this process, by (kernel bytes, reference side, target, size): an
# estimate is a function of those alone (the compile never runs the kernel), so a second sweep over the same
# template (the Auto loop's next iteration, a repeated tool call) compiles only what it has not seen.
_ESTIMATES: dict[str, tuple[str, dict]] = {}  # key -> (chip, the estimate job's result)
_ESTIMATES_MAX = 4096


def _estimate_key(source: str, side_json: str, target: str, size: str) -> str:
    import hashlib

    h = hashlib.sha256()
    for part in (source, side_json, target, size):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _remember(key: str, chip: str, result: dict) -> None:
    if str(result.get("error", "")).startswith("tampered"):
        return  # a verdict about one run's process, not about the bytes
    while len(_ESTIMATES) >= _ESTIMATES_MAX:
        _ESTIMATES.pop(next(iter(_ESTIMATES)))
    _ESTIMATES[key] = (chip, result)


class SpaceError(ValueError):
    """The caller's search space is malformed (empty, too large, not lists)."""


def expand(space: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The cross product of `space`, in order; raises SpaceError for an empty or huge space."""
    if not space:
        raise SpaceError("the search space names no tunable: pass e.g. {'block_m': [128, 256]}")
    for k, vals in space.items():
        if isinstance(vals, str | bytes) or not isinstance(vals, Sequence) or not vals:
            raise SpaceError(f"tunable {k!r} needs a non-empty list of values, got {vals!r}")
    n = 1
    for vals in space.values():
        n *= len(vals)
    if n > MAX_SPACE:
        raise SpaceError(f"the space has {n} configs, more than {MAX_SPACE}: narrow some tunables")
    keys = list(space)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*space.values())]


def render(template_source: str, config: Mapping[str, Any]) -> str:
    """Fill `${name}` placeholders; a placeholder the config lacks raises KeyError."""
    return Template(template_source).substitute({k: str(v) for k, v in config.items()})


# ---------------------------------------------------------------------------------------------------
# Pool jobs: trace a candidate at the reference's shapes and estimate it, no compile.


# ---------------------------------------------------------------------------------------------------
# The sweep


VMEM_PLACEHOLDER = "${vmem_limit_bytes}"
_BUFFERED = re.compile(r"Buffered\(\s*(?:buffer_count\s*=\s*)?(\d+)")


def _raised_limit(need: int, capacity: int) -> int | None:
    """A vmem_limit_bytes with 10% headroom over `need` (whole MiB), or None if physical VMEM is short."""
    mib = 1 << 20
    return min(-(-int(need * 1.1) // mib) * mib, capacity) if need <= capacity else None


def _prune_by_estimate(r: ConfigResult, res: dict, can_raise: bool) -> int | None:
    """Apply the estimate's verdict; returns a vmem_limit_bytes to retry the config with, if it needs one.

    VMEM is judged by the compiler when it ran (tier llo: its 'exceeded scoped vmem limit' error or a
    clean compile), by the model only when it did not.
    """
    if res.get("layout_problems"):
        r.status, r.pruned_reason, r.failure = "pruned", "layout", "; ".join(res["layout_problems"][:3])
        return None
    if not res.get("ok") and "compiler_vmem_bytes" not in res:
        kind = "compile" if "compile_error" in res else "trace"
        r.status, r.pruned_reason = "pruned", kind
        r.failure = str(res.get("compile_error") or res.get("error")).splitlines()[0][:500]
        return None
    est = res.get("estimate") or {}
    if est:
        r.estimate_us = float(est["estimated_time_us"])
        r.estimate_bound = est["bound"]
    r.vmem_bytes_needed = int(res.get("compiler_vmem_bytes") or est["vmem_bytes_needed"])
    # The compiler's verdict, whenever it ran: a config it accepts is never pruned by our own count.
    compiled = bool(res.get("compiled")) or est.get("tier") == "llo" or "compiler_vmem_bytes" in res
    capacity = int(res.get("vmem_capacity_bytes") or est["vmem_capacity_bytes"])
    over_scoped = "compiler_vmem_bytes" in res or (not compiled and est["above_scoped_vmem_limit"])
    if not over_scoped and (compiled or est["fits_vmem"]):
        return None
    need = r.vmem_bytes_needed
    limit = _raised_limit(need, capacity)
    already = isinstance(r.config.get("vmem_limit_bytes"), int)
    if limit is not None and can_raise and not already:
        return limit
    r.status, r.pruned_reason = "pruned", "vmem"
    if limit is None:
        r.failure = f"needs {need} B of VMEM, the chip has {capacity} B"
    elif not can_raise:
        r.failure = (
            f"needs {need} B of VMEM, above the scoped limit; it fits physical VMEM with vmem_limit_bytes="
            f"{limit}: put {VMEM_PLACEHOLDER} in the template's CompilerParams to sweep it raised"
        )
    else:
        r.failure = f"needs {need} B of VMEM even with vmem_limit_bytes={r.config.get('vmem_limit_bytes')}"
    return None


def probe_buffer_counts_job(counts: list[int]) -> dict:
    """Pool job: which pl.Buffered(buffer_count=n) the installed JAX lowers for TPU (no chip needed)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def copy(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    ok = {}
    for n in counts:

        def f(x, n=n):
            spec = pl.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=pl.Buffered(buffer_count=n))
            return pl.pallas_call(
                copy,
                out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                grid=(4,),
                in_specs=[spec],
                out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            )(x)

        try:
            jax.jit(f).trace(jax.ShapeDtypeStruct((32, 128), jnp.float32)).lower(lowering_platforms=("tpu",))
            ok[str(n)] = True
        except Exception:
            ok[str(n)] = False
    return {"jax": jax.__version__, "supported": ok}


def _cache_dir() -> Path:
    import os

    return Path(os.environ.get("MAXKERNEL_CACHE_DIR") or Path.home() / ".cache" / "maxkernel")


def supported_buffer_counts(evaluator: Evaluator, counts: Sequence[int]) -> dict[int, bool]:
    """pl.Buffered counts the installed JAX accepts: probed once per jax version, cached on disk."""
    from importlib.metadata import version

    path = _cache_dir() / f"buffered-jax-{version('jax')}.json"
    cached: dict[str, bool] = {}
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    missing = sorted({int(n) for n in counts if str(n) not in cached})
    if missing:
        from maxkernel.tpu_tools.pool.workers import JobSpec

        out = evaluator.pool.run(  # seconds, once per jax version: not worth a cancel
            JobSpec(
                fn="maxkernel.tpu_tools.cost.autotune:probe_buffer_counts_job",
                kwargs={"counts": missing},
                timeout_s=120,
            )
        )
        if out.status != "ok" or not out.result:
            return {}  # unknown: prune nothing
        cached.update(out.result["supported"])
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(cached))
        except OSError:
            pass
    return {int(k): bool(v) for k, v in cached.items()}


def autotune(
    evaluator: Evaluator,
    template_source: str,
    space: Mapping[str, Sequence[Any]],
    reference: str,
    target: str = "tpu-v6e",
    size: str | None = None,
    *,
    max_configs: int = 4,
    objective: Objective = "estimate",
    workdir: str | Path | None = None,
    check: CheckFn | None = None,
    validate_seeds: int = 1,
    check_sizes: list[str] | None = None,
    on_progress: ProgressFn | None = None,
) -> AutotuneReport:
    """Sweep `space` over `template_source` for `reference` on `target`; see the module docstring.

    `size` is the target size (None: the reference's production size): configs are traced, pruned,
    estimated, ranked and compiled at it, and validated at the check sizes (`Evaluator.validate`;
    `check_sizes` None: small plus the derived size). Ranked by the estimate, a config whose estimate
    is no better than a valid one's cannot become `best`, so it is not compiled or validated.
    """
    say = on_progress or (lambda _msg: None)
    if max_configs < 1:
        raise SpaceError(f"max_configs should be >= 1, got {max_configs}")
    configs = expand(space)
    work = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="maxkernel-autotune-"))
    work.mkdir(parents=True, exist_ok=True)
    results = [ConfigResult(config=c, status="not_run") for c in configs]
    notes: list[str] = []

    can_raise = VMEM_PLACEHOLDER in template_source
    if can_raise and "vmem_limit_bytes" not in space:
        for r in results:
            r.config["vmem_limit_bytes"] = None  # the chip's default scoped limit until a config needs more
    # pl.Buffered counts: probe the usual ones (plus any the template or space names) once per jax version
    counts = {1, 2, 3, 4} | {int(n) for n in _BUFFERED.findall(template_source)}
    counts |= {int(v) for vals in space.values() for v in vals if isinstance(v, int) and 0 < v <= 8}
    supported = supported_buffer_counts(evaluator, sorted(counts)) if "Buffered" in template_source else {}

    to_estimate: list[ConfigResult] = []
    rendered: dict[str, int] = {}  # source -> first config index: an identical kernel is evaluated once
    for i, r in enumerate(results):
        try:
            source = render(template_source, r.config)
            bad = sorted({int(n) for n in _BUFFERED.findall(source) if supported.get(int(n)) is False})
            if bad:
                r.status, r.pruned_reason = "pruned", "unsupported"
                r.failure = (
                    f"pl.Buffered(buffer_count={bad[0]}) is rejected by the installed JAX (probed once)"
                )
                continue
        except (KeyError, ValueError) as e:
            r.status, r.pruned_reason, r.failure = "pruned", "render", f"template placeholder missing: {e}"
            continue
        if source in rendered:
            j = rendered[source]
            r.status, r.pruned_reason = "pruned", "duplicate"
            r.failure = f"renders the same kernel as config {j} {results[j].config}: evaluated once"
            continue
        rendered[source] = i
        problems = list(check(r.config)) if check is not None else []
        if problems:
            r.status, r.pruned_reason, r.failure = "pruned", "illegal", "; ".join(problems)
            continue
        path = work / f"config_{i:04d}.py"
        path.write_text(source)
        r.kernel_path = str(path)
        to_estimate.append(r)

    side, side_failure = (
        evaluator.reference_side(reference, size, with_values=True) if to_estimate else (None, None)
    )
    if side is not None and side.size:
        size = side.size  # the resolved target size: estimates, compiles and the tuned-config cache use it
    if side_failure is not None or (to_estimate and side is None):
        notes.append(
            f"no static estimates (the reference: {side_failure.summary if side_failure else '?'}): unranked"
        )
    elif to_estimate:
        from maxkernel.tpu_tools.judge.outcomes import hide_paths_for, outcome_failure

        assert side is not None
        hidden = hide_paths_for(_abs(reference), str(work))
        side_json = side.model_dump(mode="json")

        def run_chunk(chunk: list[ConfigResult], c: int, k: int):
            return evaluator._run(
                "maxkernel.tpu_tools.judged.estimate_jobs:estimate_batch_job",
                {
                    "kernel_paths": [r.kernel_path for r in chunk],
                    "reference_side": side_json,
                    "target": target,
                    "size": size or "default",
                },
                timeout_s=evaluator.timeout_s,
                on_progress=(lambda m: say(f"autotune: {m} (part {c} of {k})")) if k > 1 else say,
                cancel=None,
                hide_paths=hidden,
            )

        side_key = json.dumps(side_json, sort_keys=True)
        reused = 0

        def run_batch(batch: list[ConfigResult]) -> tuple[JobOutcome, list[dict]]:
            """Estimate `batch` split over the pool's workers (each part one child, one jax start-up); a
            kernel whose bytes this process estimated before for the same reference, target and size is
            not compiled again."""
            nonlocal reused
            keys = {
                r.kernel_path: _estimate_key(
                    Path(r.kernel_path or "").read_text(), side_key, target, size or ""
                )
                for r in batch
            }
            todo = [r for r in batch if keys[r.kernel_path] not in _ESTIMATES]
            reused += len(batch) - len(todo)
            k = max(1, min(int(getattr(evaluator.pool, "max_workers", 1)), len(todo) // MIN_PER_PART))
            parts = [todo[c::k] for c in range(k)] if todo else []
            say(
                f"autotune: estimating {len(todo)} configs at {size or 'default'} on {target} in {k} part(s)"
                + (
                    f" ({len(batch) - len(todo)} estimated before in this process)"
                    if len(todo) < len(batch)
                    else ""
                )
            )
            outs: list[JobOutcome] = []
            if parts:
                with ThreadPoolExecutor(max_workers=k) as ex:
                    outs = list(ex.map(lambda c: run_chunk(parts[c], c + 1, k), range(k)))
            for out in outs:
                if out.status != "ok" or out.result is None:
                    return out, []
            for part, out in zip(parts, outs, strict=True):
                for r, res in zip(part, out.result["results"], strict=True):
                    _remember(keys[r.kernel_path], out.result["chip"], res)
            results_of = [_ESTIMATES[keys[r.kernel_path]][1] for r in batch]
            if outs:
                return outs[0], results_of
            chip = _ESTIMATES[keys[batch[0].kernel_path]][0]
            return JobOutcome(status="ok", result={"chip": chip}, message="every estimate reused"), results_of

        batch = to_estimate
        for _round in range(2):  # the second round re-estimates configs kept with a raised VMEM limit
            outcome, results_of = run_batch(batch)
            if outcome.status != "ok" or outcome.result is None:
                notes.append(
                    f"no static estimates ({outcome_failure(outcome, 'estimate').summary}): unranked"
                )
                break
            retry = []
            for r, res in zip(batch, results_of, strict=True):
                limit = _prune_by_estimate(r, res, can_raise)
                if limit is not None:
                    r.config["vmem_limit_bytes"] = limit
                    assert r.kernel_path is not None
                    Path(r.kernel_path).write_text(render(template_source, r.config))
                    retry.append(r)
            if _round == 0:
                notes.append(f"estimates are static estimates for {outcome.result['chip']}, not timings")
                if reused:
                    notes.append(
                        f"{reused} of {len(batch)} configs' estimates reused: this process estimated the same "
                        "kernel bytes for the same reference, target and size before"
                    )
            if retry and _round == 0:
                notes.append(
                    f"{len(retry)} configs over the default scoped VMEM kept with a raised vmem_limit_bytes"
                )
            batch = retry
            if not batch:
                break

    ranked = sorted((r for r in results if r.status == "not_run"), key=_by_estimate)
    from maxkernel.tpu_tools.cost import tuned_configs  # the per-chip cache of tuned configs (suite helper)

    cached = tuned_configs.lookup(estimate_chip(target), reference, size, template_source) if size else None
    if cached is not None and any(r.config == cached.config for r in ranked):
        ranked.sort(key=lambda r: r.config != cached.config)  # stable: the cached best goes first
        notes.append(
            f"started from the cached best {cached.config} ({cached.tier}, found by {cached.found_by})"
        )
    chip_present = bool(getattr(evaluator.pool, "device_owner", False))
    validate_target = target  # the target's numerics (judge/error_rule.py); off the chip it runs interpreted
    if not chip_present:
        notes.append(
            f"no accelerator attached: validated in TPU interpret mode on CPU, at {target}'s numerics"
        )

    best_valid: ConfigResult | None = None
    skipped = 0
    chosen = ranked[:max_configs]
    for n, r in enumerate(chosen, 1):
        assert r.kernel_path is not None
        if objective == "estimate" and best_valid is not None and _by_estimate(r) >= _by_estimate(best_valid):
            skipped += 1  # it cannot become best: its estimate is no better than a valid config's
            r.failure = f"not evaluated: its estimate is no better than valid config {best_valid.config}'s"
            continue
        say(f"autotune: config {n}/{len(chosen)} {r.config}: compile at {size or 'default'}, validate")
        comp = evaluator.compile(r.kernel_path, reference, target, size)
        r.compile_ok = comp.ok
        if not comp.ok:
            r.status = "compile_failed"
            r.failure = comp.failure.summary if comp.failure else "compile failed"
            continue
        val = evaluator.validate(
            r.kernel_path, reference, validate_target, size, check_sizes=check_sizes, seeds=validate_seeds
        )
        r.validate_ok = val.ok
        r.status = "valid" if val.ok else "invalid"
        if not val.ok:
            r.failure = val.failure.summary if val.failure else "validation failed"
        elif best_valid is None or _by_estimate(r) < _by_estimate(best_valid):
            best_valid = r
    if skipped:
        notes.append(
            f"{skipped} of the top {len(chosen)} configs not evaluated: ranked by the estimate, none could "
            f"beat the valid config {best_valid.config if best_valid else '?'}"
        )

    kind: Literal["estimate", "measured"] = "estimate"
    valid = [r for r in results if r.status == "valid"]
    if objective == "measured":
        if chip_present and valid:
            for r in valid:
                assert r.kernel_path is not None
                prof = evaluator.profile(r.kernel_path, reference, target, size)
                stats = prof.measured.get("candidate") if prof.candidate_measured else None
                r.measured_median_ms = stats.median_ms if stats is not None else None
            kind = "measured"
        else:
            notes.append("objective 'measured' needs the chip present: ranked by the static estimate instead")
    if kind == "measured":
        timed = [r for r in valid if r.measured_median_ms is not None]
        best = min(timed, key=lambda r: r.measured_median_ms or 0.0, default=None)
    else:
        best = min(valid, key=_by_estimate, default=None)
    if best is not None and size:
        t_us = (
            best.measured_median_ms * 1e3
            if kind == "measured" and best.measured_median_ms
            else best.estimate_us
        )
        tuned_configs.record(
            estimate_chip(target),
            reference,
            size,
            template_source,
            best.config,
            time_us=t_us,
            tier=kind,
            found_by="autotune",
        )
    return AutotuneReport(
        kind=kind,
        reference=reference,
        target=target,
        size=size or "default",
        check_sizes=check_sizes,
        objective=objective,
        space_size=len(configs),
        configs=results,
        best=best,
        pruned=dict(Counter(r.pruned_reason for r in results if r.status == "pruned" and r.pruned_reason)),
        evaluated=sum(1 for r in results if r.compile_ok is not None),
        notes=notes,
    )


def _by_estimate(r: ConfigResult) -> float:
    """The ranking key: the static estimate, unranked configs last."""
    return r.estimate_us if r.estimate_us is not None else float("inf")


def _abs(reference: str) -> str:
    p = Path(reference).expanduser()
    return str(p.resolve()) if p.exists() else reference


def autotune_kernel(
    template_source: str,
    space: dict[str, list[Any]],
    reference: str,
    target: str = "tpu-v6e",
    size: str | None = None,
    max_configs: int = 4,
    objective: Objective = "estimate",
    evaluator: Evaluator | None = None,
    check_sizes: list[str] | None = None,
) -> AutotuneReport:
    """One-call entry point for the MCP tool `autotune_kernel` (default pool, a fresh workdir)."""
    return autotune(
        evaluator or Evaluator(),
        template_source,
        space,
        reference,
        target,
        size,
        max_configs=max_configs,
        objective=objective,
        check_sizes=check_sizes,
    )
