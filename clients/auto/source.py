"""A PyTorch/Triton source as the Auto loop's reference: ported first (checked against the source, cached in
the run directory), and the best kernel judged against the source itself at the end (source parity). The
pieces search shares live in clients/source_port.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from maxkernel.clients.source_port import PARITY_FILE, PORT_FILE, parity_verdict, port_brief, port_into


def port_first(store: Any, workspace: Path, staged: str, seeds: int) -> dict:
    """Port the source before any server starts: a refusal is a usage error that leaves no run behind."""
    return port_into(store.root, workspace, staged, seeds)


async def source_parity(client: Any, store: Any, summary: dict, seeds: int) -> dict:
    """The best kernel against the PyTorch source (interpret mode on CPU, fresh seeds); added to the summary."""
    import json

    if not store.path(PORT_FILE).is_file():
        return summary
    port = json.loads(store.path(PORT_FILE).read_text())
    summary["port"] = port_brief(port)
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
