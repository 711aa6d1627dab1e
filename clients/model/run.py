"""The chain of a model run: hotspots -> extract the top K regions -> a suite over them -> compose the
kernels that validated -> one report. Each stage's result stays in the run directory, so a run killed at
any point continues with `--resume RUN_DIR` and repeats nothing it finished (the suite's own store
resumes its tasks; hotspots and extracts are cached files; compose, the cheap last step, runs again).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from maxkernel.clients.model import stages
from maxkernel.clients.model.report import REPORT_JSON, REPORT_TEXT, ModelReport, RegionRow, text
from maxkernel.clients.source_port import PORT_FILE
from maxkernel.tpu_tools.cli import args as cli_args
from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.port.source import is_torch_source
from maxkernel.tpu_tools.profile.scoreboard import TaskRow, row_vs_xla

RUN_FILE = "model_run.json"
COMPOSED_DIR = "composed"


class ModelRunSettings(BaseModel):
    """What a resumed run reuses unchanged (RUN_DIR/model_run.json)."""

    model: str
    top: int
    rank: str = "share"  # a run recorded before --rank existed ranked by share
    mode: str
    target: str
    size: str | None
    check_sizes: list[str] | None
    llm: str
    concurrency: int
    iterations: int
    test_cases: int
    seeds: int
    task_max_evaluations: int


def _note(args: argparse.Namespace):
    if args.quiet or args.json:
        return lambda line: None
    return lambda line: print(f"model: {line}", file=sys.stderr, flush=True)


def _suite_args(args: argparse.Namespace, suite_dir: Path, resume: bool) -> argparse.Namespace:
    return argparse.Namespace(
        resume=str(suite_dir) if resume else None,
        run_dir=str(suite_dir),
        quiet=args.quiet,
        json=args.json,
        server=list(args.server),
        token=args.token,
        engine=args.engine,
        ray_address=args.ray_address,
        profile_on=args.profile_on,
        reference="",  # the suite's own --reference (a folder of sources): the model run passes references
        seeds=args.seeds,
    )


def _suite_resumable(suite_dir: Path) -> bool:
    """A suite store with its settings in it; one killed before it had them is started again."""
    from maxkernel.clients.suite.store import SUITE_FILE, SuiteStore

    if not SuiteStore.exists(suite_dir):
        return False
    peek = SuiteStore(suite_dir, requeue=False)
    try:
        if peek.get_meta("settings") is not None:
            return True
    finally:
        peek.close()
    for name in (SUITE_FILE, SUITE_FILE + "-wal", SUITE_FILE + "-shm"):
        (suite_dir / name).unlink(missing_ok=True)
    return False


def _chosen_by(hs: Any, top: list[str], rank: str) -> str:
    """One line: how the regions were chosen, with each one's figure."""
    if rank == "gain":
        figs = [f"{rid} {stages.region_gain_us(hs.region(rid)):.4g} us" for rid in top]
        return (
            f"regions chosen by what a perfect kernel could win of the step (--rank gain): {', '.join(figs)}"
        )
    figs = [f"{rid} {hs.region(rid).share:.1%}" for rid in top]
    return f"regions chosen by share of the step (--rank share): {', '.join(figs)}"


async def run_model(args: argparse.Namespace, servers: list[Any] | None = None) -> ModelReport:
    from maxkernel.clients.suite.cli import run_suite
    from maxkernel.clients.suite.runner import SuiteSettings
    from maxkernel.tpu_tools.cli.model import HOTSPOTS_TIMEOUT_S
    from maxkernel.tpu_tools.judge.evaluate import Evaluator

    note = _note(args)
    evaluator = Evaluator(timeout_s=HOTSPOTS_TIMEOUT_S)
    if args.resume:
        run_dir = Path(args.resume)
        s = ModelRunSettings.model_validate_json((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    else:
        s = ModelRunSettings(
            model=args.model_ref, top=args.top, rank=args.rank, mode=args.mode, target=args.target, size=args.size,
            check_sizes=args.check_sizes, llm=args.llm, concurrency=args.concurrency,
            iterations=args.iterations, test_cases=args.test_cases, seeds=args.seeds,
            task_max_evaluations=args.task_max_evaluations,
        )  # fmt: skip
        run_dir = Path(args.run_dir or f"runs/model-{time.strftime('%Y%m%d-%H%M%S')}-{Path(s.model).stem}")
    # 0. a PyTorch/Triton source: ported first and checked against it; the run is over the port
    created = None
    if not args.resume and is_torch_source(s.model):
        created = cli_args.first_missing(run_dir)
        port = _port_first(s, run_dir, note)
        s = s.model_copy(update={"model": str((run_dir / "workspace" / port["workspace_port"]).resolve())})
    # 1. hotspots: before the run directory exists (a model that does not trace leaves nothing behind)
    note(
        f"hotspots of {s.model} on {s.target} " + (f"(size {s.size})" if s.size else "(its production size)")
    )
    try:
        hs, cached = stages.hotspots(
            evaluator, s.model, s.target, s.size, run_dir if args.resume else None, note
        )
    except BaseException:
        if created is not None:  # a port's run directory: nothing else ran
            shutil.rmtree(created, ignore_errors=True)
        raise
    if not args.resume:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / RUN_FILE).write_text(s.model_dump_json(indent=1), encoding="utf-8")
        stages.save_hotspots(run_dir, hs)
    note(
        f"step {hs.step_us:.4g} us (estimate, {hs.tier}){' (cached)' if cached else ''}; run directory {run_dir}"
    )
    top = stages.top_regions(hs, s.top, s.rank)
    notes = [_chosen_by(hs, top, s.rank)]
    if len(top) < s.top:
        notes.append(f"--top {s.top}: the step has {len(top)} region(s) with a cost; all of them were taken")
    # 2. extract the top K regions into the suite's workspace; one that cannot be extracted (a tool limitation
    # found after the run started) stays as the model has it, and its row says why: never exit 2 here
    refs: dict[str, str] = {}
    unextracted: dict[str, str] = {}
    uncomposable: dict[str, str] = {}
    for rid in top:
        cost = hs.region(rid)
        if not cost.region.extractable:
            unextracted[rid] = f"not extracted: {cost.region.extract_note}"
            note(f"region {rid}: {unextracted[rid]}")
            continue
        if not cost.region.composable:  # no kernel for it could go in a step: no suite spent on it
            uncomposable[rid] = f"not composable: {cost.region.compose_note}"
            note(f"region {rid}: {uncomposable[rid]}")
            continue
        try:
            rep, was = stages.extract(evaluator, s.model, rid, run_dir, note)
        except UsageError as e:
            unextracted[rid] = f"not extracted: {e}"
            note(f"region {rid}: {unextracted[rid]}")
            continue
        refs[rid] = str(Path(rep.path).resolve())
        note(f"region {rid}: {rep.path}{' (cached)' if was else ''}")
    # 3. a suite over the extracted references (its store resumes; its live line shows progress)
    suite_dir = run_dir / stages.SUITE_DIR
    tasks = [rid for rid in top if rid in refs]
    rows: dict[str, Any] = {}
    if tasks:
        settings = SuiteSettings(
            tasks=tasks, references=refs, check_sizes=s.check_sizes, mode=s.mode, model=s.llm, target=s.target,
            size=hs.size, concurrency=s.concurrency, iterations=s.iterations, test_cases=s.test_cases,
            seeds=s.seeds, task_max_evaluations=s.task_max_evaluations,
        )  # fmt: skip
        resume = _suite_resumable(suite_dir)
        suite = await run_suite(_suite_args(args, suite_dir, resume), servers, settings=settings)
        rows = {r["task"]: r for r in suite["rows"]}
    for rid, why in (unextracted | uncomposable).items():
        rows[rid] = {"status": "not_run", "note": f"{why}; left as the model has it"}
    # 4. compose the kernels that validated
    kernels: dict[str, str] = {}
    for rid in top:
        r = rows.get(rid) or {}
        if r.get("correct") and r.get("kernel_file"):
            kernels[rid] = str((suite_dir / r["kernel_file"]).resolve())
        elif rid not in unextracted and rid not in uncomposable:
            notes.append(f"{rid}: no valid kernel, left as the model has it ({_verdict(r)})")
    composed, estimate = None, None
    slower: list = []
    if kernels:
        composed, estimate = _compose(evaluator, s, hs, kernels, refs, run_dir, notes, note)
        slower = not_faster(estimate, kernels)
        if slower:  # a valid kernel that does not beat the model's own region is not put in the step
            for e in slower:
                notes.append(
                    f"{e.region}: its kernel's estimate ({e.after_us:.4g} us) does not beat the model's own "
                    f"region ({e.before_us:.4g} us): left as the model has it"
                )
                kernels.pop(e.region)
            composed, estimate = (
                _compose(evaluator, s, hs, kernels, refs, run_dir, notes, note) if kernels else (None, None)
            )
    if not kernels:
        notes.append(
            "no region's kernel beats the model's own: the step is the model's own"
            if slower
            else "no region has a valid kernel: the step is the model's own"
        )
    outcomes = {rid: "not_extracted" for rid in unextracted} | {rid: "not_composed" for rid in uncomposable}
    outcomes.update({e.region: "not_faster" for e in slower})
    if composed is not None and composed.get("ok"):
        outcomes.update({rid: "not_composed" for rid in kernels if rid not in composed.get("kernels", [])})
    elif composed is not None:
        outcomes.update({rid: "not_composed" for rid in kernels})
    report = _report(s, hs, top, refs, rows, suite_dir, run_dir, composed, estimate, notes, outcomes)
    if (run_dir / PORT_FILE).is_file():  # a ported PyTorch source: the composed step against the source
        report = _source_parity(report, run_dir, composed, s.seeds, note)
    (run_dir / REPORT_JSON).write_text(report.model_dump_json(indent=1), encoding="utf-8")
    (run_dir / REPORT_TEXT).write_text(text(report) + "\n", encoding="utf-8")
    return report


def _port_first(s: ModelRunSettings, run_dir: Path, note) -> dict:
    """Port the source into RUN_DIR/workspace before anything traces (port.json and port.py cached in the
    run directory); a refused port is a UsageError that leaves nothing behind."""
    from maxkernel.clients.source_port import port_into

    created = cli_args.first_missing(run_dir)
    workspace = run_dir / "workspace"
    staged = workspace / "references" / Path(s.model).name
    try:
        staged.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(s.model, staged)
        port = port_into(run_dir, workspace, f"references/{staged.name}", s.seeds)
    except BaseException:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
    note(port.get("summary") or "ported")  # after it: a refusal stays the one line a script reads
    return port


def _source_parity(report: ModelReport, run_dir: Path, composed, seeds: int, note) -> ModelReport:
    """The composed step (the model with its kernels in it) against the PyTorch source itself."""
    from maxkernel.clients.source_port import parity_here, port_brief

    port = json.loads((run_dir / PORT_FILE).read_text(encoding="utf-8"))
    path = (composed or {}).get("path") if (composed or {}).get("ok") else None
    note("judge the composed step against the PyTorch source")
    parity = parity_here(
        run_dir, run_dir / "workspace", port, Path(path) if path else None, seeds, "the composed step",
        allow_plain_jax=True,  # the step's ops outside its kernels are the model's own, as compose checks it
    )  # fmt: skip
    return report.model_copy(update={"port": port_brief(port), "source_parity": parity})


def not_faster(estimate, kernels: dict[str, str]) -> list:
    """The regions whose kernel is in the step but whose estimate does not beat the model's own region."""
    return [
        e for e in (estimate.regions if estimate is not None else [])
        if e.region in kernels and e.after_us is not None and e.after_us >= e.before_us
    ]  # fmt: skip


def _compose(evaluator, s, hs, kernels, refs, run_dir, notes, note):
    """Every valid kernel in the step at once; if that does not match the model (even under compose's
    depth-grown tolerance), each kernel is added alone, largest region first,
    and kept only while the step still matches. Each try is its own directory under composed/."""
    from maxkernel.tpu_tools.model.compose import compose

    root = run_dir / COMPOSED_DIR
    shutil.rmtree(root, ignore_errors=True)  # compose is the cheap last step: a resumed run makes it again
    check = (s.check_sizes or ["small"])[0]
    tries = [list(kernels)]
    if len(kernels) > 1:
        tries += [[rid] for rid in kernels]  # kernels is in share order
    accepted: list[str] = []
    best = None
    for n, want in enumerate(tries):
        ids = want if n == 0 else [*accepted, *want]
        if n > 0 and (best is not None and best.ok and set(ids) <= set(best.kernels)):
            continue
        if n > 0 and ids == tries[0]:
            continue  # the whole set already failed
        note(f"compose {', '.join(ids)} into {s.model} (checked at {check}, estimated at {hs.size})")
        try:
            c = compose(
                evaluator, s.model, {r: kernels[r] for r in ids}, str(root / str(n)), target=s.target,
                size=hs.size, check_sizes=[check], references=refs, hotspots=hs, seeds=s.seeds,
                on_progress=note,
            )  # fmt: skip
        except UsageError as e:
            notes.append(f"compose of {', '.join(ids)} refused: {e}")
            continue
        if c.ok:
            accepted, best = ids, c
            if n == 0:
                break
        else:
            notes.append(f"with {', '.join(ids)} in it, {c.verdict}")
            if best is None:
                best = c
    if best is None:
        return {"ok": False, "verdict": "compose refused every kernel", "path": None}, None
    dropped = [r for r in kernels if r not in best.kernels] if best.ok else []
    if dropped:
        notes.append(f"left out of the step (it matched the model without them): {', '.join(dropped)}")
    composed = {
        "ok": best.ok,
        "verdict": best.verdict,
        "path": best.composed_path,
        "kernels": list(best.kernels),
        "tolerance": best.tolerance_note,
    }
    if not best.ok or best.estimate is None:
        notes.append(f"no end-to-end estimate with kernels: {best.estimate_note or best.verdict}")
    return composed, best.estimate


def _verdict(row: dict[str, Any]) -> str:
    if not row:
        return "not run (the suite stopped before it)"
    if row.get("correct"):
        return "correct: " + "; ".join(row.get("correct_evidence") or [])
    return row.get("note") or row.get("status") or "not correct"


def _report(s, hs, top, refs, rows, suite_dir, run_dir, composed, estimate, notes, outcomes) -> ModelReport:
    by_region = {e.region: e for e in estimate.regions} if estimate is not None else {}
    out = []
    for rid in top:
        cost = hs.region(rid)
        r = rows.get(rid) or {}
        e = by_region.get(rid)
        out.append(
            RegionRow(
                region=rid, count=cost.region.count, share=cost.share, before_us=cost.total_us,
                after_us=e.after_us if e else None, speedup=e.speedup if e else None, reference=refs.get(rid),
                kernel=str((suite_dir / r["kernel_file"]).resolve()) if r.get("correct") and r.get("kernel_file") else None,
                verdict=_verdict(r), in_step=bool(e and e.after_us is not None),
                vs_xla=row_vs_xla(TaskRow.model_validate(r)) if r.get("task") else None,
                outcome="in_step" if e and e.after_us is not None else outcomes.get(rid, "no_valid_kernel"),
            )
        )  # fmt: skip
    if estimate is not None:
        before, after, tier = estimate.step_before_us, estimate.step_after_us, estimate.tier
        arithmetic = estimate.arithmetic
        notes = notes + estimate.notes
    else:
        before = after = hs.step_us
        tier = f"step: {hs.tier}; kernels: none"
        arithmetic = f"after = step = {hs.step_us:.4g} us (no kernel in the step); speedup 1x"
    return ModelReport(
        model=hs.model, run_dir=str(run_dir), mode=s.mode, target=hs.target, size=hs.size,
        check_sizes=s.check_sizes or ["the server's default check sizes"], tier=tier, step_before_us=before,
        step_after_us=after, speedup=before / after if after else 1.0, arithmetic=arithmetic, regions=out,
        composed=composed, notes=notes,
        composed_us=estimate.composed_us if estimate is not None else None,
        composed_speedup=estimate.composed_speedup if estimate is not None else None,
        composed_note=estimate.composed_note if estimate is not None else "",
    )  # fmt: skip


def dump(report: ModelReport) -> str:
    return json.dumps(report.model_dump(mode="json"), indent=2)
