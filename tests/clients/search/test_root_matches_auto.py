"""Offline search starts where the offline Auto loop starts: from the same task text (summary, source and
traced program, `clients/task_text.py`), so it has a first kernel for every reference the Auto loop has
one for. Proposals only: nothing is compiled or evaluated. The server's two reading tools are answered
in-process (`LocalTaskSource`), for both, so the comparison is of the two clients' own code paths.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest
from conftest_paths import ROOT

from maxkernel.clients.auto.loop import AutoLoop
from maxkernel.clients.auto.state import AutoConfig
from maxkernel.clients.cli import main as orchestrate
from maxkernel.clients.mcp_client import ServerToolError
from maxkernel.clients.models import Budget, Ledger
from maxkernel.clients.offline.model import OfflineModel
from maxkernel.clients.offline.program_text import HEADING
from maxkernel.clients.progress import NullReporter
from maxkernel.clients.run_store import RunStore
from maxkernel.clients.search.cli import _reference_text, make_proposer, prepare_proposer
from maxkernel.clients.search.proposer import NoRootKernel
from maxkernel.clients.task_text import LocalTaskSource, source_text, task_text
from maxkernel.jaxbench.registry import list_task_ids
from maxkernel.tpu_tools.hardware.chips import CHIPS

EXAMPLES = sorted(str(p) for p in (ROOT / "examples").glob("*_reference.py"))
REFERENCES = [*list_task_ids(), *EXAMPLES]


class LocalServer(LocalTaskSource):
    """The reading tools the Auto loop's first two steps call, in-process; traces are memoized so the
    Auto loop and the search share one per reference."""

    traces: dict = {}
    on_progress = None

    async def describe_reference(self, reference: str, size: str | None = None) -> dict:
        key = (reference, size)
        if key not in self.traces:
            try:
                self.traces[key] = await super().describe_reference(reference, size)
            except ServerToolError as e:
                self.traces[key] = e
        if isinstance(self.traces[key], Exception):
            raise self.traces[key]
        return self.traces[key]

    async def list_chips(self) -> list[dict]:
        return [c.model_dump(mode="json") for c in CHIPS.values()]

    async def find_examples(self, **_: object) -> dict:
        raise ServerToolError("find_examples", "no example index in this test")


def auto_first_kernel(reference: str, tmp_path: Path) -> str | None:
    """The offline Auto loop's plan and implement steps, as `maxkernel-orchestrate auto` starts them."""
    is_file = Path(reference).is_file()
    config = AutoConfig(
        task=Path(reference).stem if is_file else reference,
        reference=reference,
        task_spec=source_text(Path(reference).read_text()) if is_file else "",
        size="small",
        iterations=1,
    )
    store = RunStore(tmp_path / f"auto-{Path(reference).stem}")
    loop = AutoLoop.start(OfflineModel(), [LocalServer()], store, config, reporter=NullReporter())
    asyncio.run(loop.run(max_steps=2))
    return loop.state.current.source


def search_root(reference: str, refused: dict[str, str] | None = None) -> str | None:
    """The search's model proposer, made and prepared as `maxkernel-orchestrate search` does; a refusal
    (NoRootKernel, the one line the CLI prints) is kept in `refused`."""
    args = argparse.Namespace(proposer="model", model="offline", root=None, target="tpu-v6e", size="small")
    proposer = make_proposer(args, reference, Ledger(), Budget())
    asyncio.run(prepare_proposer(proposer, LocalServer(), reference, "small"))
    try:
        return asyncio.run(proposer.root()).source
    except NoRootKernel as e:
        if refused is not None:
            refused[reference] = str(e)
        return None


@pytest.mark.slow  # traces 54 references (~20 s on a loaded 2-core box); nothing is evaluated
def test_search_has_a_root_kernel_wherever_the_auto_loop_has_a_first_kernel(tmp_path):
    auto = {r for r in REFERENCES if auto_first_kernel(r, tmp_path)}
    refused: dict[str, str] = {}
    search = {r for r in REFERENCES if search_root(r, refused)}
    assert auto == search
    # the offline model's reach: it writes shape-generic kernels only (#21), so it refuses, saying why,
    # a program whose numbers follow the size in a way it cannot write from the input shapes (a
    # convolution's output area or volume) or whose structure changes with size (ragged paged attention)
    by_size = {
        r
        for r, why in refused.items()
        if "follow the size in no way it can write" in why or "changes structure with size" in why
    }
    assert {Path(r).name for r in by_size} <= {"7p_Ragged_Paged_Attention"} | {
        Path(r).name for r in REFERENCES if "Conv" in Path(r).name
    }, sorted(by_size)
    assert len(auto) >= len(REFERENCES) - len(by_size) - 2, sorted(set(REFERENCES) - auto - by_size)


def test_the_search_task_text_is_the_auto_loops(tmp_path):
    ref = str(ROOT / "examples" / "layernorm_reference.py")
    args = argparse.Namespace(proposer="model", model="offline", root=None, target="tpu-v6e", size="small")
    proposer = make_proposer(args, ref, Ledger(), Budget())
    assert proposer.task_spec == _reference_text(ref) and HEADING not in proposer.task_spec
    asyncio.run(prepare_proposer(proposer, LocalServer(), ref, "small"))
    config = AutoConfig(task="layernorm", reference=ref, task_spec=source_text(Path(ref).read_text()))
    loop = AutoLoop.start(OfflineModel(), [LocalServer()], RunStore(tmp_path / "a"), config)
    asyncio.run(loop._prepare())
    assert proposer.task_spec == loop.config.task_spec and HEADING in proposer.task_spec


def test_offline_beam_search_on_a_plain_layer_norm_reference(tmp_path, capsys):
    """The issue's command, with the in-process estimate objective (the search's cheapest evaluator)."""
    argv = ["search", "--reference", str(ROOT / "examples" / "layernorm_reference.py"), "--model", "offline"]
    argv += ["--algorithm", "beam", "--objective", "estimate", "--max-evaluations", "2", "--quiet"]
    argv += ["--run-dir", str(tmp_path / "run"), "--cache", str(tmp_path / "c.sqlite")]
    assert orchestrate(argv) == 0, capsys.readouterr().err
    assert "best:" in capsys.readouterr().out


def test_the_search_asks_its_first_evaluators_server_for_the_task_text(tmp_path):
    """With real evaluators the task text comes over MCP (get_task, describe_reference), as the Auto
    loop's does; a reference that cannot trace leaves the source alone, with a note."""
    from maxkernel.clients.search.remote import MCPEvaluator
    from maxkernel.server.app import build_server

    bad = tmp_path / "bad_ref.py"
    bad.write_text((ROOT / "examples" / "layernorm_reference.py").read_text() + "\nworkload = None\n")
    notes: list[str] = []

    async def go():
        async with MCPEvaluator(build_server(workspace=str(tmp_path))) as ev:
            good = await task_text(ev, "12p_RMSNorm", "small")
            broken = await task_text(ev, "bad_ref.py", "small", source_text("x = 1"), note=notes.append)
            return good, broken

    good, broken = asyncio.run(go())
    assert '"id": "12p_RMSNorm"' in good and HEADING in good and '"rsqrt"' in good
    assert broken == source_text("x = 1") and notes and "describe_reference failed" in notes[0]
