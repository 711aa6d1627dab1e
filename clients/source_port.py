"""A PyTorch/Triton source as an orchestrator's reference, the pieces auto and search share: port it in a
child before any server starts (checked against the source; a refusal is bad input), and say whether the
best kernel matches the source itself (source parity)."""

from __future__ import annotations

import json
from pathlib import Path

from maxkernel.tpu_tools.errors import UsageError

PORT_FILE = "port.json"
PARITY_FILE = "source_parity.json"


def port_in_child(workspace: Path, staged: str, seeds: int) -> dict:
    """`maxkernel port --json` in a child (the command the port_source tool runs) on a source staged in the
    workspace; the report, with the port's and the source reference's workspace paths. UsageError when the
    source cannot be ported at all (bad input). The port is checked on at least 2 seeds (`port` needs them)."""
    import subprocess
    import sys

    workspace = Path(workspace).absolute()  # the child runs in it: a relative run directory would move
    stem = Path(staged).stem
    out = str(Path(staged).with_name(f"{stem}_port.py"))
    cmd = [sys.executable, "-m", "maxkernel.tpu_tools.cli.main", "port", str(workspace / staged)]
    # the port's weak-check guard compares the source over seeds: one seed cannot show it moves
    cmd += ["--out", str(workspace / out), "--seeds", str(max(2, seeds)), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(workspace))
    if not proc.stdout.strip():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1].removeprefix("maxkernel: ")
        raise UsageError(f"cannot port {staged}: {last}")
    report = json.loads(proc.stdout)
    report["workspace_port"] = out
    report["workspace_source_reference"] = str(Path(out).with_name(f"{stem}_port_source.py"))
    return report


def port_into(run_dir: Path, workspace: Path, staged: str, seeds: int) -> dict:
    """Port the source and cache the report (port.json) and the port (port.py) in the run directory; a
    refused port is a UsageError (after port.json is written, for whoever keeps the directory)."""
    report = port_in_child(workspace, staged, seeds)
    (run_dir / PORT_FILE).write_text(json.dumps(report, indent=2), encoding="utf-8")
    if not report.get("ok"):
        raise UsageError(
            f"the port of {staged} was refused ({report.get('status')}): {report.get('summary')}"
        )
    port_text = (workspace / report["workspace_port"]).read_text(encoding="utf-8")
    (run_dir / "port.py").write_text(port_text, encoding="utf-8")
    return report


def port_brief(report: dict) -> dict:
    """What a summary shows of a port: the source, the path that made it, its check against the source."""
    return {
        "source": report.get("source"),
        "path": report.get("port_path"),
        "check": (report.get("check") or {}).get("status"),
        "summary": report.get("summary"),
    }


def parity_verdict(report: dict, seeds: int, what: str = "the kernel") -> tuple[bool, str]:
    """(ok, sentence) from a validate report against the source reference: what ran, where, on which seeds."""
    checks = [c.get("size") for c in report.get("checks", []) if c.get("what") == "validate" and c.get("ok")]
    if report.get("ok"):
        return True, (
            f"{what} matches the PyTorch source at {', '.join(checks)} on {seeds} fresh seeds "
            f"(offset {report.get('seed_offset')}, interpret mode on CPU)"
        )
    failure = report.get("failure") or {}
    return (
        False,
        f"{what} does not match the PyTorch source: {failure.get('kind')}: {failure.get('summary')}",
    )


def parity_here(
    run_dir: Path,
    workspace: Path,
    port: dict,
    kernel: Path | None,
    seeds: int,
    what: str = "the kernel",
    *,
    allow_plain_jax: bool = False,
) -> dict:
    """Source parity judged in this process (the validate command's evaluator; the candidate runs in its
    own child): `kernel` against the source reference, interpret mode on CPU, fresh seeds. The report
    goes to source_parity.json; returns {ok, summary}. `allow_plain_jax`: a composed model step, whose
    ops outside its kernels are the model's own (as compose validates it)."""
    if kernel is None:
        return {"ok": False, "summary": f"no {what.removeprefix('the ')} to judge against the source"}
    from maxkernel.tpu_tools.judge.evaluate import Evaluator

    reference = str((Path(workspace) / port["workspace_source_reference"]).absolute())
    report = Evaluator().validate(
        str(Path(kernel).absolute()), reference, "cpu", seeds=seeds, allow_plain_jax=allow_plain_jax
    )
    dumped = report.model_dump(mode="json")
    (run_dir / PARITY_FILE).write_text(json.dumps(dumped, indent=2), encoding="utf-8")
    ok, text = parity_verdict(dumped, seeds, what)
    return {"ok": ok, "summary": text}
