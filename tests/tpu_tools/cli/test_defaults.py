"""One default per flag: every parser of maxkernel, maxkernel-orchestrate and maxkernel-server, and every
MCP tool's input schema, read whole, not from a list of flags someone remembered to check.

A flag that two places share has one default, unless it is listed in DIFFERENT with the reason (its
meaning differs, and its --help says so). The shared grammar's constants (tpu_tools/cli/args.py) are the
defaults wherever their flag appears, whatever values they hold.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import pytest
from mcp import Client

from maxkernel.clients.cli import build_parser as orchestrate_parser
from maxkernel.server.app import build_server
from maxkernel.server.main import build_parser as server_parser
from maxkernel.tpu_tools.cli import args as cli_args
from maxkernel.tpu_tools.cli.main import build_parser as maxkernel_parser

# MCP spells the CLI's --timeout as timeout_s
SAME_FLAG = {"timeout_s": "timeout"}
# The grammar's constants: wherever the flag appears, this is its default.
GRAMMAR = {
    "target": cli_args.DEFAULT_TARGET,
    "compile_target": cli_args.DEFAULT_TARGET,
    "validate_target": cli_args.DEFAULT_TARGET,
    "profile_target": cli_args.DEFAULT_TARGET,
    "size": cli_args.DEFAULT_SIZE,
    "seeds": cli_args.DEFAULT_SEEDS,
    "seed_offset": cli_args.DEFAULT_SEED_OFFSET,
    "reps": cli_args.DEFAULT_REPS,
}
# A job's wall-clock limit: one default, but profile times two sides (and bench profiles every task).
PROFILE_LIKE = {"maxkernel profile", "maxkernel bench", "mcp profile_kernel"}
# A whole model step compiles for minutes at its production shapes: one longer limit for those verbs.
WHOLE_MODEL = {
    "maxkernel hotspots", "maxkernel extract", "maxkernel compose",
    "mcp find_hotspots", "mcp extract_region", "mcp compose_kernels",
}  # fmt: skip
DIFFERENT = {
    (
        "iterations",
        "orchestrate suite",
    ): "a suite runs every task: one iteration each (--help names auto's 5)",
    ("test_cases", "orchestrate suite"): "a suite runs every task: fewer cases each (--help names auto's 3)",
    (
        "iterations",
        "orchestrate model",
    ): "a model run is a suite over its regions: the suite's budget each (--help names auto's 5)",
    (
        "test_cases",
        "orchestrate model",
    ): "a model run is a suite over its regions: the suite's cases each (--help names auto's 3)",
    (
        "top",
        "orchestrate model",
    ): "how many regions of the model to optimize, not how many trace rows to show",
    ("max_evaluations", "orchestrate suite"): "the whole suite's budget; per task is --task-max-evaluations",
    (
        "objective",
        "mcp autotune_kernel",
    ): "autotune's objective (estimate|measured), not search's (server|estimate)",
    ("out", "orchestrate auto"): "hidden old spelling of auto's runs root",
    ("out", "orchestrate report"): "hidden old spelling of report's --html",
    ("reference", "orchestrate suite"): "a task set ('all' or ids), not one reference",
    ("check_sizes", "maxkernel compose"): "a whole model step in interpret mode: small only (--help says so)",
    (
        "check_sizes",
        "mcp compose_kernels",
    ): "a whole model step in interpret mode: small only (the schema says so)",
    (
        "workspace",
        "server",
    ): "the server's own; auto and search default to RUN_DIR/workspace for the one they spawn",
}


def _parser_defaults(parser: argparse.ArgumentParser, where: str, out: dict) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                _parser_defaults(sub, f"{where} {name}", out)
        elif action.option_strings and action.dest != "help":
            out[action.dest][where] = action.default


@pytest.fixture(scope="module")
def defaults(tmp_path_factory) -> dict[str, dict[str, object]]:
    """flag -> {place: default}, for every option of every parser and every MCP tool parameter."""
    import anyio

    out: dict[str, dict[str, object]] = defaultdict(dict)
    _parser_defaults(maxkernel_parser(), "maxkernel", out)
    _parser_defaults(orchestrate_parser(), "orchestrate", out)
    _parser_defaults(server_parser(), "server", out)

    async def tools():
        async with Client(build_server(tmp_path_factory.mktemp("ws"))) as client:
            return (await client.list_tools()).tools

    for tool in anyio.run(tools):
        schema = tool.input_schema
        for name, prop in schema.get("properties", {}).items():
            if name not in schema.get("required", []) and "default" in prop:
                out[SAME_FLAG.get(name, name)][f"mcp {tool.name}"] = prop["default"]
    return dict(out)


def test_every_shared_flag_has_one_default(defaults):
    differ = {}
    for flag, places in defaults.items():
        if flag == "timeout":
            continue  # its own rule below
        kept = {w: v for w, v in places.items() if (flag, w) not in DIFFERENT}
        if len({repr(v) for v in kept.values()}) > 1:
            differ[flag] = kept
    assert not differ, differ


def test_the_grammars_constants_are_the_defaults_everywhere(defaults):
    wrong = {
        (flag, where): value
        for flag, want in GRAMMAR.items()
        for where, value in defaults.get(flag, {}).items()
        if value != want and (flag, where) not in DIFFERENT
    }
    assert not wrong, wrong
    assert len(defaults["target"]) >= 15 and len(defaults["size"]) >= 15  # every parser and tool was read


def test_timeouts_are_the_grammars(defaults):
    for where, value in defaults["timeout"].items():
        want = cli_args.PROFILE_TIMEOUT_S if where in PROFILE_LIKE else cli_args.DEFAULT_TIMEOUT_S
        if where in WHOLE_MODEL:
            from maxkernel.tpu_tools.cli.model import HOTSPOTS_TIMEOUT_S as want
        assert value == want, where


def test_each_listed_difference_still_exists_and_says_why(defaults):
    for (flag, where), why in DIFFERENT.items():
        assert where in defaults.get(flag, {}), f"{flag} at {where} is gone: drop it from DIFFERENT ({why})"
    suite = " ".join(
        orchestrate_parser()._subparsers._group_actions[0].choices["suite"].format_help().split()
    )
    assert "defaults to 5" in suite and "defaults to 3" in suite and "defaults to 40" in suite


@pytest.mark.parametrize("verb", ["analyze", "estimate", "compile", "validate", "profile", "bench"])
def test_help_prints_the_grammars_target(verb):
    text = maxkernel_parser()._subparsers._group_actions[0].choices[verb].format_help()
    assert f"default: {cli_args.DEFAULT_TARGET}" in " ".join(text.split())
