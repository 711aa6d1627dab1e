"""One grammar for `maxkernel`, `maxkernel-orchestrate` and `maxkernel-server`: shared flags and defaults.

Every CLI builds its common flags here, and the MCP tools take their defaults from the same constants,
so `--help`, the README table and a tool's input schema cannot drift apart. No jax import: `--help`
stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from maxkernel.tpu_tools.errors import UsageError

# ------------------------------------------------------------------ defaults (CLI and MCP share them)

DEFAULT_TARGET = "tpu-v6e"  # the compile-only TPU target: real Mosaic compile, interpret-mode execution
DEFAULT_SIZE: str | None = None  # None: the reference's production size (resolved where it is loaded)
SIZE_DEFAULT_TEXT = "the reference's production size: full if its SIZES has it, else the largest"
DEFAULT_CHECK_SIZES: list[str] | None = None  # None: small + the derived intermediate size
CHECK_SIZES_DEFAULT_TEXT = (
    "small and 'derived', grown from small keeping the alignment small and the target share (each "
    "dimension that scales grows, the one that scales most past 1024 rows where the budget allows)"
)
DEFAULT_STRICT_SHAPES = False  # the shape contract (a run off the shared alignment) is a finding, not a check
STRICT_SHAPES_HELP = (
    "fail when the kernel is wrong or raises at the 'unaligned' size (off the alignment small and the "
    "target share: each scaling dimension alone, and all together); by default what it does there is "
    "reported as its shape contract, not failed"
)
DEFAULT_SEEDS = 3
DEFAULT_SEED_OFFSET: int | None = (
    None  # None: drawn at random, recorded in the verdict (pass it back to reproduce)
)
DEFAULT_TIMEOUT_S = 300.0
PROFILE_TIMEOUT_S = 600.0  # profile runs reference + candidate + noise floor: twice the budget
DEFAULT_REPS = 30
DEFAULT_TRACE_DIR_TEXT = "~/.cache/maxkernel/traces (or $MAXKERNEL_TRACE_DIR), newest 20 kept"
TOKEN_ENV = "MAXKERNEL_TOKEN"
MAX_SEEDS = 16


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Prints each flag's default (`--help` is the one place a user looks), keeps descriptions as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        default = action.default
        if (
            "default:" in help_text
            or default is None
            or default is False
            or default == []
            or (default is argparse.SUPPRESS)
        ):
            return help_text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return f"{help_text} (default: %(default)s)"
        return help_text


class Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line on stderr and exit 2 (the usage stays in `--help`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)  # subcommands' parsers inherit this class
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def parser(prog: str, description: str, **kwargs: Any) -> argparse.ArgumentParser:
    return Parser(prog=prog, description=description, **kwargs)


def subparser(sub: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """`sub.add_parser` with the shared help formatter (defaults shown)."""
    return sub.add_parser(name, formatter_class=HelpFormatter, **kwargs)


# ------------------------------------------------------------------ value checks (argparse `type=`)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _int_between(lo: int, hi: int | None) -> Callable[[str], int]:
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    check.__name__ = "int"
    return check


seeds_count = _int_between(1, MAX_SEEDS)
non_negative_int = _int_between(0, None)


# ------------------------------------------------------------------ the shared flags


def add_reference(
    p: argparse.ArgumentParser, *, required: bool = False, positional_alias: bool = False
) -> None:
    """`--reference ID|PATH`; `--task` (old spelling) is a hidden alias, and with `positional_alias`
    a bare positional reference too. Call `take_reference(args)` after parsing to merge them."""
    p.add_argument(
        "--reference",
        "-r",
        dest="reference",
        required=required and not positional_alias,
        metavar="ID|PATH",
        help="the problem to match: a JaxBench task id (8p_GEMM, 8p) or a reference file/directory",
    )
    p.add_argument("--task", dest="reference_task", help=argparse.SUPPRESS)
    if positional_alias:
        p.add_argument("reference_positional", nargs="?", metavar="REFERENCE", help=argparse.SUPPRESS)


def take_reference(args: argparse.Namespace) -> str | None:
    """The one reference the command line names (from --reference, --task or the positional)."""
    given = [
        v
        for v in (
            getattr(args, "reference", None),
            getattr(args, "reference_task", None),
            getattr(args, "reference_positional", None),
        )
        if v
    ]
    if len(set(given)) > 1:
        raise UsageError(f"the reference is given twice ({' and '.join(given)}): pass --reference once")
    args.reference = given[0] if given else None
    return args.reference


def first_missing(path: str | os.PathLike) -> Any:
    """The highest ancestor of `path` (or `path`) that does not exist yet: what a failed start removes."""
    from pathlib import Path

    p = Path(path).absolute()
    missing = None
    for q in (p, *p.parents):
        if q.exists():
            break
        missing = q
    return missing


def check_new_run_dir(path: str | os.PathLike) -> None:
    """A new run goes into a directory that is absent or empty; an old one is continued with --resume."""
    from pathlib import Path

    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"--run-dir {path} is a file, not a directory")
    if p.is_dir() and any(p.iterdir()):
        raise UsageError(f"--run-dir {path} exists and is not empty: continue it with --resume {path}")


def name_too_long(e: BaseException) -> str | None:
    """The one-line usage error for a name the OS refuses to look up (ENAMETOOLONG: a list of task ids or a
    pasted source given where a path or an id goes), else None: any other error is not the caller's input."""
    import errno

    if not isinstance(e, OSError) or e.errno != errno.ENAMETOOLONG:
        return None
    name = str(e.filename or "")
    shown = f"{name[:60]}...{name[-20:]}" if len(name) > 90 else name
    return f"a name too long for the filesystem ({len(name)} characters): {shown!r}; give an id, a path, or ids separated by commas where a list is taken"


def looks_like_path(reference: str) -> bool:
    return any(c in reference for c in "/\\") or reference.endswith(".py")


def check_reference(reference: str, *, remote: bool = False) -> str:
    """A JaxBench id (canonical, e.g. '8p' -> '8p_GEMM') or an existing path; else UsageError, before
    anything is created. With `remote`, a path that is not here is left for the server to resolve."""
    from pathlib import Path

    from maxkernel.jaxbench.registry import UnknownTaskError, resolve_id, resolve_model

    if Path(reference).expanduser().exists():
        return reference
    if looks_like_path(reference):
        if remote:
            return reference
        raise UsageError(f"reference file not found: {reference}")
    try:
        return resolve_id(reference)
    except UnknownTaskError as e:
        try:
            return resolve_model(reference)
        except UnknownTaskError:
            raise UsageError(str(e)) from None


def add_target(p: argparse.ArgumentParser, default: str = DEFAULT_TARGET) -> None:
    from maxkernel.tpu_tools.hardware.targets import TARGET_NAMES

    p.add_argument(
        "--target",
        "-t",
        default=default,
        metavar="NAME",
        help=f"where to compile/run: {', '.join(TARGET_NAMES)}",
    )


def check_target(name: str) -> None:
    from maxkernel.tpu_tools.hardware.targets import UnknownTargetError, parse_target

    try:
        parse_target(name)
    except UnknownTargetError as e:
        raise UsageError(str(e)) from None


def add_size(p: argparse.ArgumentParser, default: str | None = DEFAULT_SIZE) -> None:
    p.add_argument(
        "--size",
        default=default,
        metavar="NAME",
        help="the target size, a name from the reference's SIZES: the shape the kernel is for; compile, "
        f"estimate, tune, profile and scores use it (default: {default or SIZE_DEFAULT_TEXT})",
    )


def add_check_sizes(p: argparse.ArgumentParser, default_text: str = CHECK_SIZES_DEFAULT_TEXT) -> None:
    """`--check-size NAME` (repeatable): where validation interprets the kernel off the chip. Unset, the
    evaluation core's default, which `default_text` describes (a verb with its own default says so)."""
    p.add_argument(
        "--check-size",
        dest="check_sizes",
        action="append",
        default=DEFAULT_CHECK_SIZES,
        metavar="NAME",
        help="a check size, repeatable: validation runs the kernel at each (off the chip in interpret "
        f"mode); a SIZES name, 'derived' or 'unaligned' (default: {default_text})",
    )


def add_strict_shapes(p: argparse.ArgumentParser) -> None:
    """`--strict-shapes`: the shape-contract probe is a check, not a finding."""
    p.add_argument(
        "--strict-shapes",
        action="store_true",
        default=DEFAULT_STRICT_SHAPES,
        help=f"{STRICT_SHAPES_HELP} (default: off)",
    )


def check_size_names(reference: str, size: str | None, check_sizes: list[str] | None) -> None:
    """Unknown `--size` / `--check-size` names are one usage error before a run or a server exists.

    Only a reference that loads here is checked; one only a server sees is left to the server's check.
    """
    if size is None and not check_sizes:
        return
    from maxkernel.tpu_tools.problem.reference import load_reference

    try:
        ref = load_reference(reference)
    except Exception:  # noqa: BLE001 - not loadable here (a server-side path): the server checks the names
        return
    if size is not None and size not in ref.info.sizes:
        raise UsageError(
            f"--size {size!r}: reference {ref.info.name!r} has no such size; it has {ref.info.sizes}"
        )
    if check_sizes is not None and len(set(check_sizes)) != len(check_sizes):
        raise UsageError(f"--check-size names a size twice: {check_sizes}")
    from maxkernel.tpu_tools.problem.sizes import SYNTHETIC

    for name in check_sizes or []:  # 'derived' is the reference's to derive: a server says why it cannot
        if name not in SYNTHETIC:
            try:
                ref.check_size(name)
            except UsageError as e:
                raise UsageError(f"--check-size {name!r}: {e}") from None


def size_kwargs(size: str | None) -> dict[str, str]:
    """`size=` for the evaluation core, omitted when unset so the core picks the reference's default."""
    return {} if size is None else {"size": size}


def add_run_dir(p: argparse.ArgumentParser, *, help_text: str, default: str | None = None) -> None:
    p.add_argument("--run-dir", default=default, metavar="DIR", help=help_text)


def add_server(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--server",
        action="append",
        default=[],
        metavar="URL",
        help="a running maxkernel-server (http://HOST:PORT/mcp), repeatable "
        "(default: spawn a local stdio server)",
    )
    p.add_argument("--token", help=f"bearer token for --server (default: env {TOKEN_ENV})", metavar="TOKEN")


ENGINES = ("local", "ray")
PROFILE_ON = ("auto", "chip", "any")


def add_engine(p: argparse.ArgumentParser) -> None:
    """`--engine local|ray`, `--ray-address`, `--profile-on`: where a run's evaluations go."""
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="local: the --server list (default: a local stdio server); ray: a Ray cluster of hosts",
    )
    p.add_argument(
        "--ray-address",
        default="auto",
        metavar="auto|HOST:PORT",
        help="with --engine ray: the cluster's head ('auto': the cluster this machine joined)",
    )
    p.add_argument(
        "--profile-on",
        choices=PROFILE_ON,
        default="auto",
        help="with --engine ray: chip = time only on a host with the target's chip (fail at once if none "
        "has it); any = any host (off the chip: a labeled estimate); auto = chip when the cluster has one",
    )


def check_engine(args: argparse.Namespace) -> None:
    """The engine flags agree with each other (before anything is created)."""
    if getattr(args, "engine", "local") != "ray":
        if getattr(args, "ray_address", "auto") != "auto" or getattr(args, "profile_on", "auto") != "auto":
            raise UsageError("--ray-address and --profile-on go with --engine ray")
        return
    if getattr(args, "server", None):
        raise UsageError("give --engine ray or --server, not both: with Ray the cluster's hosts evaluate")


def server_token(args: argparse.Namespace) -> str | None:
    return getattr(args, "token", None) or os.environ.get(TOKEN_ENV, "").strip() or None


def auth_refused(url: str, status: int = 401) -> str:
    """The one line an auth failure prints, in both `auto` and `search`."""
    return f"the server at {url} refused the token ({status}): pass --token or set {TOKEN_ENV}"


def add_json(p: argparse.ArgumentParser, what: str = "the report") -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout")


def add_seeds(p: argparse.ArgumentParser, *, offset: bool = True) -> None:
    p.add_argument(
        "--seeds",
        type=seeds_count,
        default=DEFAULT_SEEDS,
        metavar="N",
        help="fresh input seeds per validation",
    )
    if offset:
        p.add_argument(
            "--seed-offset",
            type=non_negative_int,
            default=DEFAULT_SEED_OFFSET,
            metavar="N",
            help="first seed (default: drawn at random; the verdict records it, pass it back to reproduce)",
        )


def add_timeout(p: argparse.ArgumentParser, default: float = DEFAULT_TIMEOUT_S) -> None:
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=default,
        metavar="SECONDS",
        help="wall-clock limit per evaluation process, > 0",
    )


def add_trace_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trace-dir",
        metavar="DIR",
        help=f"keep the profiler trace under DIR (default: {DEFAULT_TRACE_DIR_TEXT})",
    )


@contextlib.contextmanager
def quiet_broken_pipe() -> Iterator[None]:
    """`... --json | head`: the reader went away. Silence stdout (so Python's exit flush cannot raise
    again) and turn it into the one-line UsageError every CLI prints with exit 2."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise UsageError("output closed early (broken pipe)") from None
