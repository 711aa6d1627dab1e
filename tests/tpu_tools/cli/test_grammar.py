"""One grammar across maxkernel, maxkernel-orchestrate and maxkernel-server (#13 items 2, 4, 7).

Each test names the bullet it guards. CLI tests run real subprocesses; MCP tests a real in-memory session.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest_paths import MATMUL_REF, REFS
from mcp import Client

from maxkernel.jaxbench import registry
from maxkernel.server.app import build_server
from maxkernel.tpu_tools.cli import args as cli_args


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _tool_defaults(tools, name: str) -> dict:
    props = tools[name].input_schema["properties"]
    return {k: v.get("default") for k, v in props.items()}


@pytest.mark.anyio
async def test_mcp_tool_defaults_equal_the_cli_defaults(tmp_path):
    """Defaults are one list: the CLI's parser and every MCP tool's schema take them from cli_args."""
    from maxkernel.clients.cli import build_parser as orchestrate_parser
    from maxkernel.tpu_tools.cli.main import build_parser

    async with Client(build_server(tmp_path / "ws")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in ("compile_kernel", "validate_kernel", "profile_kernel", "estimate_kernel", "autotune_kernel"):
        assert _tool_defaults(tools, name)["target"] == cli_args.DEFAULT_TARGET, name
    sized = ("compile_kernel", "validate_kernel", "profile_kernel", "evaluate_kernel", "estimate_kernel")
    for name in (*sized, "analyze_kernel"):
        # None: the reference's own default, as on the CLI
        assert _tool_defaults(tools, name)["size"] is cli_args.DEFAULT_SIZE is None, name
    ev = _tool_defaults(tools, "evaluate_kernel")
    assert ev["compile_target"] == ev["validate_target"] == ev["profile_target"] == cli_args.DEFAULT_TARGET
    val = _tool_defaults(tools, "validate_kernel")
    assert (val["seeds"], val["seed_offset"]) == (cli_args.DEFAULT_SEEDS, cli_args.DEFAULT_SEED_OFFSET)
    assert val["timeout_s"] == cli_args.DEFAULT_TIMEOUT_S

    sub = build_parser()._subparsers._group_actions[0].choices
    for verb in ("compile", "validate", "profile"):
        args = sub[verb].parse_args(["k.py", "--reference", "8p"])
        assert args.target == cli_args.DEFAULT_TARGET and args.size is None, verb
    args = sub["validate"].parse_args(["k.py", "-r", "8p"])
    assert (args.seeds, args.seed_offset, args.timeout) == (
        val["seeds"],
        val["seed_offset"],
        val["timeout_s"],
    )
    assert (
        sub["profile"].parse_args(["k.py", "-r", "8p"]).timeout
        == _tool_defaults(tools, "profile_kernel")["timeout_s"]
    )
    osub = orchestrate_parser()._subparsers._group_actions[0].choices
    for verb in ("auto", "search"):
        assert osub[verb].parse_args([]).target == cli_args.DEFAULT_TARGET, verb


@pytest.mark.anyio
async def test_plan_kernel_renders_for_a_workspace_reference_and_says_why_not(tmp_path):
    """plan_kernel with a reference path renders that module; a bad one gets a precise reason."""
    from mcp.shared.exceptions import MCPError

    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(MATMUL_REF, ws / "my_reference.py")
    async with Client(build_server(ws)) as client:
        plan = await client.get_prompt("plan_kernel", {"task": "my_reference.py"})
        body = plan.messages[0].content.text
        assert Path(MATMUL_REF).read_text().splitlines()[0] in body and "def workload" in body
        with pytest.raises(MCPError, match="nope.py"):
            await client.get_prompt("plan_kernel", {"task": "nope.py"})
        with pytest.raises(MCPError, match="99p_Nope"):
            await client.get_prompt("plan_kernel", {"task": "99p_Nope"})
        with pytest.raises(MCPError, match="prompts need a TPU generation"):
            await client.get_prompt("plan_kernel", {"task": "8p", "target": "cpu"})


def test_server_port_in_use_is_one_line_exit_2_before_the_banner(tmp_path):
    """maxkernel-server on a taken port: one line naming the port, rc 2, no banner, no uvicorn error."""
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "maxkernel.server.main", "--transport", "http", "--port", str(port)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "in use" in lines[0], proc.stderr
    assert "http://" not in proc.stderr and not list(tmp_path.iterdir())  # no banner, no workspace


# ------------------------------------------------------------------ the command line itself (subprocesses)

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from conftest_paths import ROOT, kernel  # noqa: E402

BIN = Path(sys.executable).parent


def sh(tool: str, *args: str, cwd: Path, timeout: float = 240, env: dict | None = None):
    return subprocess.run(
        [str(BIN / tool), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "80", **(env or {})},
    )


# every JaxBench task id, comma-separated: ~1.5 KB, over the 255-byte limit of one path component
LONG_IDS = ",".join(registry.list_task_ids())


def one_line_exit_2(p: subprocess.CompletedProcess, needle: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize(
    "tool, argv, needle",
    [
        ("maxkernel", ["validate", kernel("good_matmul"), "-r", "8p", "--timeout", "0"], "must be > 0"),
        ("maxkernel", ["profile", kernel("good_matmul"), "-r", "8p", "--timeout", "-1"], "must be > 0"),
        ("maxkernel", ["compile", kernel("good_matmul"), "--reference", "99p_Nope"], "unknown JaxBench task"),
        ("maxkernel-orchestrate", ["auto", "--task", "99p_Nope"], "unknown JaxBench task '99p_Nope'"),
        ("maxkernel-orchestrate", ["auto", "--resume", "/nonexistent/run"], "not a run directory"),
        ("maxkernel-orchestrate", ["search", "99p_Nope"], "unknown JaxBench task '99p_Nope'"),
        ("maxkernel-orchestrate", ["search", "--reference", "nope.py"], "reference file not found"),
        ("maxkernel-orchestrate", ["search", "--resume", "/nonexistent/run"], "not a search run directory"),
        ("maxkernel-orchestrate", ["search", "12p", "--timeout", "3"], "unrecognized arguments"),
        ("maxkernel-orchestrate", ["search", "12p", "--server", "tpu-host:8765"], "give an http(s)://"),
        ("maxkernel-orchestrate", ["auto", "--reference", "12p", "--server", "tpu-host:8765"], "http(s)://"),
        (
            "maxkernel-orchestrate",
            ["auto", "-r", "12p", "--size", "tiny"],
            "--size 'tiny': reference '12p_RMSNorm'",
        ),
        (
            "maxkernel-orchestrate",
            ["auto", "-r", "12p", "--check-size", "tiny"],
            "--check-size 'tiny': reference '12p_RMSNorm' has no size 'tiny'",
        ),
        ("maxkernel-orchestrate", ["search", "12p", "--check-size", "tiny"], "--check-size 'tiny'"),
        (
            "maxkernel-orchestrate",
            ["suite", "--reference", "12p,8p", "--check-size", "tiny"],
            "--check-size 'tiny'",
        ),
        ("maxkernel-orchestrate", ["suite", "--check-size", "small", "--check-size", "small"], "twice"),
        (
            "maxkernel-orchestrate",
            ["model", "llama3_8b_layer", "--check-size", "big"],
            "small, full or derived",
        ),
        ("maxkernel-orchestrate", ["report", "/nonexistent/run"], "give a search run directory"),
        ("maxkernel-orchestrate", ["report", "."], "give a search run directory"),
        ("maxkernel-server", ["--timeout", "0"], "must be > 0"),
        # 35 task ids make a 1 KB name: where one reference goes it is one line, not the OS's OSError
        (
            "maxkernel",
            ["validate", kernel("good_matmul"), "-r", LONG_IDS],
            "a name too long for the filesystem",
        ),
        ("maxkernel-orchestrate", ["search", "--reference", LONG_IDS], "a name too long for the filesystem"),
        (
            "maxkernel-orchestrate",
            ["suite", "--reference", LONG_IDS + ",99p_Nope"],
            "unknown JaxBench task '99p_Nope'",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_on_disk(tmp_path, tool, argv, needle):
    p = sh(tool, *argv, cwd=tmp_path, timeout=60)
    one_line_exit_2(p, needle)
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())  # no run dir, cache or workspace


@pytest.mark.anyio
async def test_the_default_size_is_the_production_size_everywhere(tmp_path):
    """--size names the target size; unset, it is the reference's production size (full, else the
    largest) in every CLI, in --help, and in every MCP tool that takes a size."""
    from maxkernel.clients.cli import build_parser as orchestrate_parser
    from maxkernel.tpu_tools.cli.main import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices
    for verb in ("compile", "validate", "profile", "analyze", "estimate"):
        p = sub[verb]
        assert p.parse_args(["k.py", "-r", "8p"]).size is None, verb
        assert cli_args.SIZE_DEFAULT_TEXT in " ".join(p.format_help().split()), verb
    assert sub["bench"].parse_args(["--tasks", "12p"]).size is None
    assert cli_args.SIZE_DEFAULT_TEXT in " ".join(sub["bench"].format_help().split())
    assert sub["validate"].parse_args(["k.py", "-r", "8p"]).check_sizes is None  # small + derived
    osub = orchestrate_parser()._subparsers._group_actions[0].choices
    for verb in ("auto", "search", "suite", "model"):
        assert osub[verb].parse_args([]).size is None, verb
        assert cli_args.SIZE_DEFAULT_TEXT in " ".join(osub[verb].format_help().split()), verb
        assert osub[verb].parse_args([]).check_sizes is None, verb  # small + derived
        assert cli_args.CHECK_SIZES_DEFAULT_TEXT in " ".join(osub[verb].format_help().split()), verb
        assert osub[verb].parse_args(["--check-size", "small"]).check_sizes == ["small"], verb
    # suite runs JaxBench tasks only: unset, it scores at full, every one's production size
    from maxkernel.clients.suite.cli import _settings

    assert _settings(osub["suite"].parse_args(["--reference", "8p,12p"])).size == "full"
    async with Client(build_server(tmp_path / "ws")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    sized = [n for n, t in tools.items() if "size" in t.input_schema["properties"]]
    assert set(sized) >= {"compile_kernel", "validate_kernel", "profile_kernel", "evaluate_kernel"}
    assert set(sized) >= {"estimate_kernel", "analyze_kernel", "autotune_kernel", "describe_reference"}
    for name in set(sized) - {"compose_kernels"}:
        prop = tools[name].input_schema["properties"]["size"]
        assert prop.get("default") is None and cli_args.SIZE_DEFAULT_TEXT in prop["description"], name
    # compose's size is the target size too (where the step compiles and is estimated)
    assert tools["compose_kernels"].input_schema["properties"]["size"].get("default") is None
    # every tool that validates takes the check sizes; unset, the default check sizes
    for name in ("validate_kernel", "evaluate_kernel", "autotune_kernel"):
        check = tools[name].input_schema["properties"]["check_sizes"]
        assert check.get("default") is None and cli_args.CHECK_SIZES_DEFAULT_TEXT in check["description"], (
            name
        )
    # compose interprets a whole model step: small unless asked, and its schema says so
    from maxkernel.tpu_tools.model.compose import COMPOSE_CHECK_SIZES_TEXT

    compose = tools["compose_kernels"].input_schema["properties"]["check_sizes"]
    assert compose.get("default") is None and COMPOSE_CHECK_SIZES_TEXT in compose["description"]
    # and the resolution itself: the production size, or the largest where there is no `full`
    from maxkernel.tpu_tools.problem.reference import load_reference

    assert load_reference("12p").default_size()[0] == "full"
    assert load_reference(str(REFS / "norm_rows_reference.py")).default_size()[0] == "big"


def test_help_prints_the_shared_defaults(tmp_path):
    def help_of(tool: str, *argv: str) -> str:
        return " ".join(sh(tool, *argv, "--help", cwd=tmp_path).stdout.split())  # unwrap argparse's lines

    h = help_of("maxkernel", "validate")
    assert "(default: tpu-v6e)" in h and cli_args.SIZE_DEFAULT_TEXT in h
    assert "--check-size" in h and cli_args.CHECK_SIZES_DEFAULT_TEXT in h
    assert "(default: 300.0)" in h and "(default: 3)" in h and "--seed-offset" in h
    assert "--task" not in h  # the old spelling works but is not advertised
    assert "~/.cache/maxkernel/traces" in help_of("maxkernel", "profile")
    s = help_of("maxkernel-orchestrate", "search")
    assert "--token" in s and "eval-cache.sqlite next to the run directory" in s and "(default: beam)" in s
    a = help_of("maxkernel-orchestrate", "auto")
    assert "--run-dir" in a and "--token" in a and "--task" not in a and "--out" not in a
    assert "(default: 8765)" in help_of("maxkernel-server")
    assert "--base-url" not in a + s


def _estimate_search(tmp_path: Path, *extra: str, run: str = "run") -> subprocess.CompletedProcess:
    return sh(
        "maxkernel-orchestrate",
        "search",
        *extra,
        "--objective",
        "estimate",
        "--run-dir",
        run,
        cwd=tmp_path,
        timeout=300,
    )


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_search_positional_reference_path_works(tmp_path):
    """`search my_reference.py` (the README's spelling) searches that file; --root gives the first kernel."""
    shutil.copy(MATMUL_REF, tmp_path / "my_reference.py")
    root = ROOT / "examples" / "matmul_kernel.py"
    p = _estimate_search(tmp_path, "my_reference.py", "--root", str(root), "--max-evaluations", "1", "--json")
    assert p.returncode == 0, p.stderr
    import json

    out = json.loads(p.stdout)
    assert out["task"]["reference"].endswith("my_reference.py") and out["evaluations"] == 1


@pytest.mark.slow  # an end-to-end scenario: make test-slow
def test_search_resume_keeps_every_option_and_its_cache(tmp_path):
    import json

    p = _estimate_search(tmp_path, "--reference", "12p", "--max-evaluations", "2", "--cache", "mine.sqlite")
    assert p.returncode == 0, p.stderr
    assert "search 2/2" in p.stderr and "best:" in p.stderr  # the live line, on stderr
    assert (tmp_path / "mine.sqlite").is_file()
    # resume with a bigger budget and nothing else: the same cache, no finished node evaluated again
    r = sh(
        "maxkernel-orchestrate", "search", "--resume", "run", "--max-evaluations", "4", "--json", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["evaluations"] == 4 and out["nodes"] == 4 and out["cache_hits"] == 0
    assert not (tmp_path / "eval-cache.sqlite").exists()  # the default cache was never opened
    refused = sh("maxkernel-orchestrate", "search", "--resume", "run", "--algorithm", "evolve", cwd=tmp_path)
    one_line_exit_2(refused, "drop --algorithm")

    # report --json into a reader that went away: one line, exit 2, no traceback
    r_fd, w_fd = os.pipe()
    os.close(r_fd)
    try:
        broken = subprocess.run(
            [str(BIN / "maxkernel-orchestrate"), "report", "run", "--json"],
            cwd=tmp_path,
            stdout=w_fd,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(w_fd)
    one_line_exit_2(broken, "broken pipe")


@pytest.mark.slow
def test_auth_failure_says_so_in_auto_and_search(eval_cwd):
    tmp_path = eval_cwd
    """Against a token-protected server, both verbs print the same one line (exit 2), nothing on disk."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    server = subprocess.Popen(
        [str(BIN / "maxkernel-server"), "--transport", "http", "--port", str(port), "--workspace", "ws"],
        cwd=tmp_path,
        env={**os.environ, "MAXKERNEL_TOKEN": "right"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as c:
                if c.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        work = tmp_path / "client"
        work.mkdir()
        no_token = {k: v for k, v in os.environ.items() if k != "MAXKERNEL_TOKEN"}
        for argv in (
            ["auto", "--reference", "12p", "--model", "offline", "--server", url],
            ["search", "12p", "--server", url],
            ["search", "12p", "--server", url, "--token", "wrong"],
        ):
            p = subprocess.run(
                [str(BIN / "maxkernel-orchestrate"), *argv],
                cwd=work,
                capture_output=True,
                text=True,
                timeout=60,
                env=no_token,
            )
            one_line_exit_2(
                p, f"the server at {url} refused the token (401): pass --token or set MAXKERNEL_TOKEN"
            )
        assert not list(work.iterdir())
        # the right token, as a flag, reaches the server from `search`: one real evaluation there
        ok = subprocess.run(
            [str(BIN / "maxkernel-orchestrate"), "search", "12p", "--server", url, "--token", "right"]
            + ["--max-evaluations", "1", "--json", "--run-dir", "run", "--check-size", "small"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=600,
            env=no_token,
        )
        assert "refused" not in ok.stderr and "Traceback" not in ok.stderr, ok.stderr
        import json

        out = json.loads(ok.stdout)
        assert out["evaluations"] == 1, ok.stdout
        # --check-size reached the server: the re-verify ran at small only (the token is what is tested)
        checked = out["reverified"]["verdict"]["validation"]["check_sizes"]
        assert [c["name"] for c in checked] == ["small"], checked
    finally:
        server.terminate()
        server.wait(10)


def test_chips_keep_their_names_at_80_columns(tmp_path):
    p = sh("maxkernel", "chips", cwd=tmp_path)  # piped: rich renders 80 columns
    from maxkernel.tpu_tools.hardware.chips import CHIPS

    for name in CHIPS:
        assert any(line.split()[:1] == [name] for line in p.stdout.splitlines()), (name, p.stdout)
    assert "…" not in p.stdout.split("per JAX device")[0]  # no cell is cut
    assert max(len(line) for line in p.stdout.splitlines()) <= 80


@pytest.fixture
def eval_cwd():
    from conftest_paths import scratch_outside_tmp

    d = scratch_outside_tmp("grammar-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_compile_report_claims_no_execution(eval_cwd):
    tmp_path = eval_cwd
    p = sh(
        "maxkernel", "compile", str(ROOT / "examples" / "matmul_kernel.py"), "-r", MATMUL_REF, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
    flat = " ".join(p.stdout.split())
    assert "executed in" not in flat and "interpret mode" not in flat, flat  # compiling runs nothing
    assert "compile only, nothing executed" in flat and "tpu-v6e" in flat


def test_profile_hint_never_names_a_reference_op():
    from maxkernel.tpu_tools.cli.render import profile_trace_text
    from maxkernel.tpu_tools.profile.trace_summary import OpStat

    def op(name, module, us):
        return OpStat(
            name=name,
            module=module,
            category="fusion",
            count=1,
            total_us=us,
            self_us=us,
            mean_us=us,
            pct_of_device_time=0.0,
        )

    text = "trace x\nhint: ynn_fusion.1 takes 67%: optimize it first\ntop ops ..."
    ref_only = profile_trace_text(text, [op("ynn_fusion.1", "jit_reference", 67.0)], candidate_traced=False)
    assert "ynn_fusion.1" not in ref_only.split("top ops")[0] and "only the reference" in ref_only
    both = [
        op("ynn_fusion.1", "jit_reference", 67.0),
        op("fusion.7", "jit_candidate", 20.0),
        op("copy.2", "jit_candidate", 5.0),
    ]
    mixed = profile_trace_text(text, both, candidate_traced=True)
    hint = next(line for line in mixed.splitlines() if line.startswith("hint: "))
    assert "fusion.7" in hint and "80%" in hint and "ynn_fusion" not in hint


def test_auto_live_line_shows_done_total_best_and_eta():
    import io

    from rich.console import Console

    from maxkernel.clients.progress import RichReporter

    buf = io.StringIO()
    rep = RichReporter(Console(file=buf, width=80, force_terminal=False))
    rep.step(1, 3, "analyze", "iteration ended: verified", "iter 1, estimate 12.5 us", "$0")
    rep.step(2, 3, "plan", "plan: bigger blocks", "iter 1, estimate 12.5 us", "$0")
    rep.close()
    out = buf.getvalue()
    assert "auto 1/3" in out and "best: iter 1, estimate 12.5 us" in out and "ETA" in out


def test_report_says_why_each_node_is_not_valid(tmp_path):
    """Each invalid/failed node: its stage, verdict kind and one line, in the JSON and on the page."""
    from maxkernel.clients.search.graph import NodeVerdict, make_node
    from maxkernel.clients.search.report import render_html, summary
    from maxkernel.clients.search.store import GraphStore

    store = GraphStore(tmp_path / "run")
    store.set_meta("task", {"reference": "8p_GEMM"})
    verdicts = {
        "src_a": NodeVerdict(
            status="invalid",
            stopped_at="validate",
            validation={"failure": {"kind": "output_mismatch", "summary": "max abs err 3.1 at (0, 5)\nmore"}},
            failure="output_mismatch: max abs err 3.1 at (0, 5)",
        ),
        "src_b": NodeVerdict(status="failed", failure="EvaluatorDown: server http://x/mcp went away"),
    }
    for src, verdict in verdicts.items():
        node, _ = store.add(make_node(src), src, proposal_key=src)
        store.start(node.id)
        store.finish(node.id, verdict, cached=False)
    why = {w["kind"]: w for w in summary(store)["not_valid"]}
    assert why["output_mismatch"]["stopped_at"] == "validate"
    assert why["output_mismatch"]["reason"] == "max abs err 3.1 at (0, 5)"  # its first line
    assert "went away" in why["EvaluatorDown"]["reason"]
    page = render_html(store)
    assert 'id="not-valid"' in page and "output_mismatch" in page and "max abs err 3.1" in page
    store.close()


def test_no_message_or_doc_names_a_flag_that_does_not_exist():
    """A hint like 'use --base-url' for a flag no parser has is a dead end: every --flag named in the
    package's source or docs is an option of maxkernel, maxkernel-orchestrate or maxkernel-server."""
    import argparse
    import re

    from maxkernel.clients.cli import build_parser as orchestrate
    from maxkernel.server.main import build_parser as server
    from maxkernel.tpu_tools.cli.main import build_parser as maxkernel

    def options(p: argparse.ArgumentParser) -> set[str]:
        out: set[str] = set()
        for action in p._actions:
            out |= set(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for sp in action.choices.values():
                    out |= options(sp)
        return out

    known = options(maxkernel()) | options(orchestrate()) | options(server())
    ray_and_unshare = {
        "--head",
        "--num-cpus",
        "--address",
        "--block",
        "--net",
        "--pid",
        "--fork",
        "--mount-proc",
    }
    # the benchmark scripts' own flags, which the README's Benchmarks section names
    bench_flags = {
        m.group(1)
        for f in (ROOT / "benchmarks").glob("*.py")
        for m in re.finditer(r'add_argument\(\s*"(--[a-z0-9-]+)"', f.read_text(encoding="utf-8"))
    }
    other_tools = {
        "docs/ide.md": {"--scope", "--header"},  # `claude mcp add` flags in the IDE guide
        "README.md": ray_and_unshare
        | bench_flags
        | {"--unshare", "--workers"},  # `ray start`, and the local cluster script
        "docs/architecture.md": ray_and_unshare,
    }
    files = [
        p
        for d in ("tpu_tools", "clients", "server", "subagents", "jaxbench")
        for p in (ROOT / d).rglob("*.py")
    ]
    files += [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "subagents").rglob("*.md")]
    unknown = {}
    bwrap_argv = {
        "tpu_tools/pool/sandbox.py",
        "tpu_tools/pool/sandbox_linux.py",
        "clients/fleet/local_cluster.py",  # `ray start` and `unshare`, and the script's own flags
        "clients/fleet/placement.py",
        "clients/fleet/ray_engine.py",
    }  # other programs' flags (bubblewrap, ray, unshare), not ours
    for f in files:
        rel = str(f.relative_to(ROOT))
        if rel in bwrap_argv:
            continue
        for m in re.finditer(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*\b", f.read_text(encoding="utf-8")):
            if m.group(0) not in known | other_tools.get(rel, set()):
                unknown.setdefault(m.group(0), rel)
    assert not unknown, unknown


@pytest.mark.slow
def test_auto_resume_keeps_its_options_and_refuses_changes(monkeypatch, capsys, tmp_path):
    """auto --resume reuses the workspace (and servers) the run started with; a run option it would
    ignore (--target) is refused in one line instead."""
    import json

    from conftest_paths import PLUS_ONE_REF

    from maxkernel.clients import cli
    from maxkernel.clients.models import registry
    from tests.clients.auto.test_loop import PLAN, PLUS_ONE, Script, code

    script = Script(planner=[PLAN], implementer=[code(PLUS_ONE)])
    monkeypatch.setattr(registry, "build_model", lambda spec: script.model)
    run, ws = tmp_path / "run", tmp_path / "my-ws"
    argv = ["auto", "--reference", PLUS_ONE_REF, "--target", "cpu", "--iterations", "1", "--no-profile"]
    argv += [
        "--test-cases",
        "0",
        "--seeds",
        "1",
        "--quiet",
        "--json",
        "--run-dir",
        str(run),
        "--workspace",
        str(ws),
    ]
    assert cli.main(argv) == 0
    capsys.readouterr()
    assert (ws / "references" / "plus_one_reference.py").is_file() and not (run / "workspace").exists()

    assert cli.main(["auto", "--resume", str(run), "--target", "tpu-v5e"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "maxkernel-orchestrate: --resume continues a run with the options it started with: drop --target"
    )

    assert cli.main(["auto", "--resume", str(run), "--quiet", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["target"] == "cpu" and summary["best"]["iteration"] == 1
    assert not (run / "workspace").exists()  # the resumed run spoke to the workspace it started with


def _into_closed_pipe(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run with stdout a pipe whose reader is gone (`... | head` after head exits)."""
    r_fd, w_fd = os.pipe()
    os.close(r_fd)
    try:
        return subprocess.run(argv, cwd=cwd, stdout=w_fd, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w_fd)


@pytest.mark.parametrize("argv", [["chips"], ["tasks", "--json"]])
def test_maxkernel_into_a_closed_pipe_is_one_line_exit_2(tmp_path, argv):
    one_line_exit_2(_into_closed_pipe([str(BIN / "maxkernel"), *argv], tmp_path), "broken pipe")


@pytest.mark.slow
def test_bench_shows_a_live_line(eval_cwd):
    tmp_path = eval_cwd
    # the defaults: tpu-v6e at the production size, absent here: the rows are estimates, and so is "best"
    p = sh("maxkernel", "bench", "--tasks", "12p", "--run-dir", "r", cwd=tmp_path, timeout=600)
    assert p.returncode in (0, 1), p.stderr
    line = " ".join(p.stderr.split())
    assert "bench 2/2" in line and "best:" in line and "ETA" in line and "/2 ok" in line, p.stderr
    assert "estimate" in line.split("best:")[-1], p.stderr
    assert (tmp_path / "r" / "results.json").is_file()  # --run-dir is where the results go
