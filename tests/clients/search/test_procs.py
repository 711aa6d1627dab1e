"""Search processes that die: a search killed with SIGKILL then resumed, and an MCP server killed mid-run.

Run as a script this file is the child: `search RUN_DIR` runs a slow scripted search, `server` is a
stdio MCP server whose evaluate_kernel scores the kernel's config by a formula.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()


def score(config: dict) -> tuple[bool, float]:
    """Valid unless block_m is 256; time falls with bigger tiles (a formula, not a kernel)."""
    t = 1000.0 / (config["block_m"] * config["block_n"] / 128) + (5 if config["grid_order"] == "nmk" else 0)
    return config["block_m"] != 256, t + config["block_k"] / 256


class FormulaEvaluator:
    def __init__(self, name: str = "formula", delay_s: float = 0.0, invalid=None) -> None:
        self.name, self.delay_s, self.calls, self.invalid = name, delay_s, [], invalid

    async def tool_versions(self) -> str:
        return "formula-1"

    async def evaluate(self, source, task, *, seeds=None):
        from maxkernel.clients.search.graph import NodeVerdict
        from maxkernel.clients.search.templates import read_config

        self.calls.append(source)
        await asyncio.sleep(self.delay_s)
        ok, t = score(read_config(source))
        if not ok or (self.invalid and self.invalid(read_config(source))):
            return NodeVerdict(
                status="invalid", stopped_at="validate", failure="wrong_result", server=self.name
            )
        return NodeVerdict(status="valid", time_us=t, time_label="estimate", server=self.name)


def make_search(
    run_dir, evaluators, *, algorithm="beam", max_evaluations=30, cache=None, concurrency=2, **kw
):
    from maxkernel.clients.fleet.servers import Dispatcher
    from maxkernel.clients.search.algorithms import Search, SearchSettings
    from maxkernel.clients.search.evaluator import CachedEvaluator, EvalTask
    from maxkernel.clients.search.proposer import TemplateProposer
    from maxkernel.clients.search.store import GraphStore
    from maxkernel.clients.search.templates import GEMM

    store = GraphStore(run_dir)
    dispatcher = Dispatcher(evaluators, concurrency)
    settings = SearchSettings(algorithm=algorithm, max_evaluations=max_evaluations, **kw)
    search = Search(
        store,
        CachedEvaluator(dispatcher, cache, "ref"),
        TemplateProposer(GEMM),
        EvalTask(reference="8p_GEMM"),
        settings,
        dispatcher=dispatcher,
    )
    return store, search


def _child_search(run_dir: str) -> None:
    from maxkernel.clients.search.store import EvalCache

    cache = EvalCache(Path(run_dir).parent / "cache.sqlite")
    store, search = make_search(
        run_dir, [FormulaEvaluator(delay_s=0.15)], algorithm="evolve", max_evaluations=40, cache=cache
    )
    asyncio.run(search.run())


def _child_server() -> None:
    from mcp.server import MCPServer

    from maxkernel.clients.search.templates import read_config

    server = MCPServer("formula-server", version="1")
    pid_file = os.environ.get("MK_PID_FILE")
    if pid_file:
        Path(pid_file).write_text(str(os.getpid()))

    @server.tool()
    async def evaluate_kernel(
        reference: str,
        kernel_source: str,
        compile_target: str = "tpu-v6e",
        validate_target: str = "cpu",
        profile_target: str = "local",
        size: str = "small",
        seeds: int = 3,
        timeout_s: float = 300.0,
    ) -> dict:
        """Score the kernel's config by a formula."""
        await asyncio.sleep(0.1)
        ok, t = score(read_config(kernel_source))
        est = {"estimated_time_us": t}
        return {
            "ok": ok,
            "stopped_at": None if ok else "validate",
            "compile": {"ok": True},
            "validation": {"ok": ok, "failure": None if ok else {"kind": "wrong_result", "summary": "no"}},
            "profile": {"static_estimate": est} if ok else None,
        }

    server.run()


def test_search_killed_with_sigkill_resumes_without_repeating_or_losing(tmp_path):
    from maxkernel.clients.search.store import GraphStore

    run = tmp_path / "run"
    child = subprocess.Popen([sys.executable, str(HERE), "search", str(run)])
    deadline = time.time() + 60
    while time.time() < deadline:  # wait until some evaluations are on disk, then kill mid-run
        time.sleep(0.3)
        if (run / "search.sqlite").exists():
            s = GraphStore(run, requeue=False)
            done = [n for n in s.nodes() if n.finished]
            s.close()
            if len(done) >= 6:
                break
    child.send_signal(signal.SIGKILL)
    child.wait()
    before = GraphStore(run, requeue=False)
    finished = {n.id: n for n in before.nodes() if n.finished}
    before.close()
    assert finished, "the child finished nothing before it was killed"

    from maxkernel.clients.search.store import EvalCache

    ev = FormulaEvaluator()
    cache = EvalCache(tmp_path / "cache.sqlite")
    store, search = make_search(run, [ev], algorithm="evolve", max_evaluations=40, cache=cache)
    result = asyncio.run(search.run())
    after = {n.id: n for n in store.nodes()}
    for nid, n in finished.items():  # nothing finished was lost or judged again
        assert after[nid].eval_seq == n.eval_seq and after[nid].verdict == n.verdict
    done = [n for n in after.values() if n.finished and not n.cached]
    assert len({n.source_hash for n in done}) == len(done), "a kernel was evaluated twice"
    from maxkernel.clients.search.graph import source_hash

    assert not {source_hash(s) for s in ev.calls} & {n.source_hash for n in finished.values()}
    assert all(n.finished for n in after.values())
    assert result.requeued_on_start <= 2 and result.best is not None


def test_two_servers_one_killed_mid_run_search_finishes_on_the_other(tmp_path):
    from mcp import StdioServerParameters

    from maxkernel.clients.search.remote import MCPEvaluator

    pid_file = tmp_path / "victim.pid"

    def params(env_extra):
        env = {**os.environ, **env_extra}
        return StdioServerParameters(command=sys.executable, args=[str(HERE), "server"], env=env)

    async def main():
        async with (
            MCPEvaluator(params({"MK_PID_FILE": str(pid_file)}), name="victim") as a,
            MCPEvaluator(params({}), name="survivor") as b,
        ):
            store, search = make_search(tmp_path / "run", [a, b], algorithm="beam", max_evaluations=14)

            async def killer():
                while len([n for n in store.nodes() if n.finished]) < 3:
                    await asyncio.sleep(0.05)
                os.kill(int(pid_file.read_text()), signal.SIGKILL)

            k = asyncio.create_task(killer())
            result = await search.run()
            k.cancel()
            return store, search, result

    store, search, result = asyncio.run(asyncio.wait_for(main(), 120))
    assert search.dispatcher.dead and search.dispatcher.dead[0].startswith("victim")
    assert result.best is not None and not result.stopped.startswith("no evaluators")
    nodes = store.nodes()
    assert all(n.finished for n in nodes) and not any(n.status == "failed" for n in nodes)
    assert any(n.verdict and n.verdict.server == "survivor" for n in nodes)


if __name__ == "__main__":
    if sys.argv[1] == "search":
        _child_search(sys.argv[2])
    elif sys.argv[1] == "server":
        _child_server()
    else:
        pytest.fail(f"unknown child mode {sys.argv[1]}")
