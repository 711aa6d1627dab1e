"""A PyTorch/Triton source as the Auto loop's reference: ported first (checked against the source, cached in
the run directory), and the best kernel judged against the source itself at the end (source parity)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from maxkernel.tpu_tools.errors import UsageError

PORT_FILE = "port.json"
PARITY_FILE = "source_parity.json"


def port_in_child(workspace: Path, staged: str, seeds: int) -> dict:
    """`maxkernel port --json` in a child (the command the port_source tool runs) on a source staged in the
    workspace; the report, with the port's and the source reference's workspace paths. UsageError when the
    source cannot be ported at all (bad input)."""
    import json
    import subprocess
    import sys

    stem = Path(staged).stem
    out = str(Path(staged).with_name(f"{stem}_port.py"))
    cmd = [sys.executable, "-m", "maxkernel.tpu_tools.cli.main", "port", str(workspace / staged)]
    cmd += ["--out", str(workspace / out), "--seeds", str(seeds), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(workspace))
    if not proc.stdout.strip():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1].removeprefix("maxkernel: ")
        raise UsageError(f"cannot port {staged}: {last}")
    report = json.loads(proc.stdout)
    report["workspace_port"] = out
    report["workspace_source_reference"] = str(Path(out).with_name(f"{stem}_port_source.py"))
    return report


def port_first(store: Any, workspace: Path, staged: str, seeds: int) -> dict:
    """Port the source before any server starts: a refusal is a usage error that leaves no run behind."""
    report = port_in_child(workspace, staged, seeds)
    out = report["workspace_port"]
    store.write_json(PORT_FILE, report)
    if not report.get("ok"):
        raise UsageError(
            f"the port of {staged} was refused ({report.get('status')}): {report.get('summary')}"
        )
    store.path("port.py").write_text((workspace / out).read_text(encoding="utf-8"), encoding="utf-8")
    return report


async def source_parity(client: Any, store: Any, summary: dict, seeds: int) -> dict:
    """The best kernel against the PyTorch source (interpret mode on CPU, fresh seeds); added to the summary."""
    import json

    if not store.path(PORT_FILE).is_file():
        return summary
    port = json.loads(store.path(PORT_FILE).read_text())
    summary["port"] = {
        "source": port.get("source"),
        "path": port.get("port_path"),
        "check": (port.get("check") or {}).get("status"),
        "summary": port.get("summary"),
    }
    best = summary.get("best")
    if not best or not best.get("path"):
        summary["source_parity"] = {"ok": False, "summary": "no kernel to judge against the source"}
    else:
        kernel = Path(best["path"]).read_text(encoding="utf-8")
        report = await client.validate_kernel(
            kernel, port["workspace_source_reference"], target="cpu", seeds=seeds
        )
        store.write_json(PARITY_FILE, report)
        ok, text = parity_verdict(report, seeds)
        summary["source_parity"] = {"ok": ok, "summary": text}
    store.write_json("summary.json", summary)
    return summary


def parity_verdict(report: dict, seeds: int) -> tuple[bool, str]:
    """(ok, sentence) from a validate report against the source reference: what ran, where, on which seeds."""
    checks = [c.get("size") for c in report.get("checks", []) if c.get("what") == "validate" and c.get("ok")]
    if report.get("ok"):
        return True, (
            f"the kernel matches the PyTorch source at {', '.join(checks)} on {seeds} fresh seeds "
            f"(offset {report.get('seed_offset')}, interpret mode on CPU)"
        )
    failure = report.get("failure") or {}
    return (
        False,
        f"the kernel does not match the PyTorch source: {failure.get('kind')}: {failure.get('summary')}",
    )
