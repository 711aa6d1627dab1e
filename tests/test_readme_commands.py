"""The README's example commands, extracted from README.md and run, so they cannot go stale (#13).

Every `maxkernel`, `maxkernel-orchestrate` and `maxkernel-server` line in a ```bash block is checked:
- cheap ones run for real, in a scratch directory holding copies of the README's files;
- slow ones (the Auto loop, a real search, a bench, a server) are parsed by the tool's own parser and
  pass its pre-flight checks (unknown flags, files, tasks, targets, unsafe server binds).
A README command that fits neither list fails the test, so a new example cannot be skipped silently.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest_paths import ROOT, scratch_outside_tmp

README = ROOT / "README.md"
TOOLS = ("maxkernel", "maxkernel-orchestrate", "maxkernel-server")
BIN = Path(sys.executable).parent

# (tool, first argument) -> how the command is checked
RUN = {
    ("maxkernel", v)
    for v in ("compile", "validate", "profile", "trace", "analyze", "estimate", "chips", "tasks")
}
RUN |= {("maxkernel", "examples")}
RUN |= {("maxkernel", "port")}  # torch on CPU: the port is written and checked for real
RUN |= {("maxkernel-orchestrate", "search-estimate")}
PARSE = {("maxkernel", "bench"), ("maxkernel-server", None)}
PARSE |= {("maxkernel-orchestrate", v) for v in ("auto", "search", "report", "suite")}


def readme_commands() -> list[str]:
    """Each command line of the README's bash blocks that starts with one of our tools."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    out = []
    for block in blocks:
        for line in block.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()  # the trailing "   # what it does"
            words = shlex.split(line) if line else []
            while words and "=" in words[0] and not words[0].startswith("-"):
                words = words[1:]  # an environment assignment: MAXKERNEL_TOKEN=… maxkernel-server …
            if words and words[0] in TOOLS:
                out.append(line)
    return out


def split(line: str) -> tuple[dict[str, str], list[str]]:
    words, env = shlex.split(line), {}
    while "=" in words[0] and not words[0].startswith("-"):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    return env, words


def kind(words: list[str]) -> tuple[str, str | None]:
    tool, verb = words[0], (words[1] if len(words) > 1 and not words[1].startswith("-") else None)
    if tool == "maxkernel-orchestrate" and verb == "search" and "--objective" in words:
        return tool, "search-estimate"
    return tool, verb if tool != "maxkernel-server" else None


@pytest.fixture(scope="module")
def scratch():
    """A directory where the README's relative paths exist: examples/, my_kernel.py, my_reference.py."""
    d = scratch_outside_tmp("readme-")
    shutil.copytree(ROOT / "examples", d / "examples")
    shutil.copy(ROOT / "jaxbench" / "tasks" / "8p_GEMM" / "pallas_reference.py", d / "my_kernel.py")
    shutil.copy(ROOT / "examples" / "matmul_reference.py", d / "my_reference.py")
    # the runs the resume/report examples name (their placeholders become these directories)
    (d / "runs" / "20250101-120000-12p_RMSNorm").mkdir(parents=True)
    (d / "runs" / "20250101-120000-12p_RMSNorm" / "state.json").write_text("{}")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_the_readme_has_examples_of_every_tool():
    lines = readme_commands()
    assert {split(x)[1][0] for x in lines} == set(TOOLS)
    assert len(lines) >= 15
    for line in lines:  # each one is checked by one of the two tests below
        assert kind(split(line)[1]) in RUN | PARSE, f"README command not covered by this test: {line}"


@pytest.mark.parametrize("line", [x for x in readme_commands() if kind(split(x)[1]) in PARSE])
def test_slow_readme_commands_parse_and_pass_preflight(line, scratch, monkeypatch):
    env, words = split(line)
    monkeypatch.chdir(scratch)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    tool, argv = words[0], words[1:]
    if tool == "maxkernel":
        from maxkernel.tpu_tools.cli.main import _check_inputs, build_parser

        args = build_parser().parse_args(argv)
        _check_inputs(args)
    elif tool == "maxkernel-server":
        from maxkernel.server.main import build_parser, http_security, read_token

        args = build_parser().parse_args(argv)
        if args.transport == "http":  # the unsafe-bind refusal would fire here
            http_security(args.host, args.port, read_token(args.token_file), args.allowed_host)
    else:
        from maxkernel.clients.cli import _check, build_parser

        argv = [a.replace("<time>", "20250101-120000") for a in argv]
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command == "auto":
            _check(args, parser)
        elif args.command == "search" and not args.resume:
            from maxkernel.tpu_tools.cli import args as cli_args

            cli_args.check_reference(cli_args.take_reference(args), remote=bool(args.server))
            cli_args.check_target(args.target)
        assert not (scratch / "runs" / "search-8p_GEMM-20250101-120000").exists()  # parsing created nothing


@pytest.mark.slow
@pytest.mark.parametrize("line", [x for x in readme_commands() if kind(split(x)[1]) in RUN])
def test_cheap_readme_commands_run(line, scratch):
    """Run in README order (the profile writes the traces/ that `maxkernel trace traces/` reads)."""
    env, words = split(line)
    p = subprocess.run(
        [str(BIN / words[0]), *words[1:]],
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
    )
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0, (line, p.stdout[-2000:], p.stderr[-2000:])
