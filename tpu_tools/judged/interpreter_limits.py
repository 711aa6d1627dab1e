"""TPU interpret mode's own limits, told apart from the kernel's faults (judged side).

Off the chip the numbers are checked by jax's TPU interpreter, and the interpreter has bugs of its own
that the Mosaic compiler does not. Two things live here:

- Workarounds that keep the computation exactly what the compiler builds. jax 0.10.2's interpreter
  crashes on a vmapped kernel (`safe_zip` length mismatch in `_get_randomized_grid_coordinates`): vmap
  adds a grid axis but not its entry in `dimension_semantics`, and the interpreter zips the two. Mosaic's
  lowering gives every vmapped grid axis "parallel" semantics (lowering.py, `MosaicGridMapping`); the
  program is rewritten to say the same before it is interpreted.
- `interpreter_failure`: whether an exception was raised by the interpreter (or the state discharge
  rules it runs on) and not by the candidate. The decision reads the live traceback: the raising frame
  and every frame from the interpreter's entry down to it must be code objects of jax's own loaded
  modules (a code object compiled under jax's file name is not one of them), with no candidate frame
  among them; while lowering, the interpreter must be entered from pallas_call's lowering rule. Errors
  raised inside host callbacks reach us as text (XLA's "CpuCallback error"): every frame in it must be
  in jax. And in every case the candidate's program must hold none of its own Python that runs after
  tracing (`own_host_code`: no host callback, no primitive lowered by a rule that is not jax's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
import sysconfig
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

# jax modules (paths under the jax package) whose failure is the interpreter's: the TPU interpreter, the
# discharge rules it evaluates kernels with.
INTERPRETER_PARTS = (
    "_src/pallas/mosaic/interpret/",
    "_src/state/discharge.py",
    "_src/pallas/mosaic/discharge",
)
_CALLBACK_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)', re.M)


# --- jaxpr rewrites -------------------------------------------------------------------------------------


def rewrite_pallas_calls(jaxpr, fix: Callable[[Any], Any | None]):
    """The jaxpr with every pallas_call eqn (nested jaxprs included) replaced by `fix(eqn)` where it
    returns one."""
    from jax._src import core as jcore

    def sub(v: Any) -> Any:
        if isinstance(v, jcore.ClosedJaxpr):
            new = rewrite_pallas_calls(v.jaxpr, fix)
            return v if new is v.jaxpr else v.replace(jaxpr=new)
        if isinstance(v, jcore.Jaxpr):
            return rewrite_pallas_calls(v, fix)
        if isinstance(v, tuple) and any(isinstance(x, (jcore.Jaxpr, jcore.ClosedJaxpr)) for x in v):
            return tuple(sub(x) for x in v)
        return v

    eqns, changed = [], False
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            new_eqn = fix(eqn)
            if new_eqn is not None:
                eqn, changed = new_eqn, True
        else:
            params = {k: sub(v) for k, v in eqn.params.items()}
            if any(params[k] is not eqn.params[k] for k in params):
                eqn, changed = eqn.replace(params=params), True
        eqns.append(eqn)
    return jaxpr.replace(eqns=eqns) if changed else jaxpr


def _vmapped_fix(found: list[str]) -> Callable[[Any], Any | None]:
    from maxkernel.tpu_tools.problem.pallas_info import _kernel_name_and_source

    def fix(eqn):
        cp = eqn.params.get("compiler_params")
        sem = getattr(cp, "dimension_semantics", None)
        gm = eqn.params["grid_mapping"]
        vmapped = tuple(getattr(gm, "vmapped_dims", ()) or ())
        if not sem or not vmapped or len(sem) + len(vmapped) != len(gm.grid):
            return None
        user = iter(sem)
        full = tuple("parallel" if i in vmapped else next(user) for i in range(len(gm.grid)))
        name, _ = _kernel_name_and_source(eqn.params)
        found.append(name)
        return eqn.replace(
            params={**eqn.params, "compiler_params": dataclasses.replace(cp, dimension_semantics=full)}
        )

    return fix


def vmapped_semantics(closed_jaxpr):
    """(the program with every vmapped grid axis marked parallel, as Mosaic marks it; the kernels changed).

    jax 0.10.2's interpreter zips the grid with `dimension_semantics` and fails (`safe_zip`) when vmap has
    added axes to the one and not the other."""
    found: list[str] = []
    jaxpr = rewrite_pallas_calls(closed_jaxpr.jaxpr, _vmapped_fix(found))
    return (closed_jaxpr if jaxpr is closed_jaxpr.jaxpr else closed_jaxpr.replace(jaxpr=jaxpr)), found


def jaxpr_workload(closed_jaxpr, out_tree) -> Callable:
    """A workload that evaluates an already traced program (traced as the target): calling it traces
    no candidate Python again."""
    import jax
    from jax._src import core as jcore

    def run(*args):
        flat = jax.tree_util.tree_leaves(args)
        return jax.tree_util.tree_unflatten(
            out_tree, jcore.eval_jaxpr(closed_jaxpr.jaxpr, closed_jaxpr.consts, *flat)
        )

    return run


def _eqns(jaxpr):
    """Every eqn of a jaxpr, nested jaxprs (kernel bodies, cond branches, pjit) included."""
    from jax._src import core as jcore

    for eqn in jaxpr.eqns:
        yield eqn
        for v in eqn.params.values():
            for x in v if isinstance(v, tuple) else (v,):
                inner = x.jaxpr if isinstance(x, jcore.ClosedJaxpr) else x
                if isinstance(inner, jcore.Jaxpr):
                    yield from _eqns(inner)


def lowering_rules() -> dict[tuple[str, Any], Any]:
    """Which lowering rule each primitive has now (CPU-specific and generic): taken before the candidate
    is imported, it tells the primitives and rules the candidate brought from jax's own. It holds the
    objects, not their ids: a rule re-registered twice could otherwise land at a freed rule's address."""
    from jax._src.interpreters import mlir

    out: dict[tuple[str, Any], Any] = {("", p): r for p, r in list(mlir._lowerings.items())}
    out.update({("cpu", p): r for p, r in list(mlir._platform_specific_lowerings.get("cpu", {}).items())})
    return out


def own_host_code(closed_jaxpr, before: dict[tuple[str, Any], Any]) -> str | None:
    """Where the candidate's own Python can run after tracing, or None: a host callback (debug callbacks
    included), or a primitive whose CPU lowering rule was not there before the candidate was imported
    (its own primitive, or a jax primitive it re-registered). Then an error raised while lowering or
    running may be the candidate's, and is never the interpreter's."""
    from jax._src.interpreters import mlir

    cpu_rules = mlir._platform_specific_lowerings.get("cpu", {})
    for eqn in _eqns(closed_jaxpr.jaxpr):
        prim, name = eqn.primitive, eqn.primitive.name
        if "callback" in name:
            return f"a host callback ({name})"
        for platform, rules in (("cpu", cpu_rules), ("", mlir._lowerings)):
            rule = rules.get(prim)
            if rule is not None and before.get((platform, prim)) is not rule:
                return f"primitive {name}, lowered by a rule registered after the candidate was imported"
    return None


# --- whose exception ------------------------------------------------------------------------------------


def _jax_root() -> Path | None:
    mod = sys.modules.get("jax")
    return Path(mod.__file__).resolve().parent if mod is not None and mod.__file__ else None


def _files() -> dict[str, types.ModuleType]:
    """Every loaded module by its resolved file."""
    out = {}
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if isinstance(f, str) and f.endswith(".py"):
            with contextlib.suppress(OSError):
                out[str(Path(f).resolve())] = mod
    return out


def _codes_of(mod: types.ModuleType) -> set[int]:
    """ids of every code object a module defines that can be reached from its namespace: functions,
    methods, nested classes and functions, lambdas, partials, decorated functions, registry dicts."""
    out: set[int] = set()
    seen: set[int] = set()

    def add(code: types.CodeType) -> None:
        if id(code) in out:
            return
        out.add(id(code))
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                add(c)

    def visit(obj, depth: int) -> None:
        if id(obj) in seen or depth > 3:
            return
        seen.add(id(obj))
        fn = getattr(obj, "__func__", obj)
        for attr in ("__wrapped__", "func", "fun"):
            inner = getattr(fn, attr, None)
            if callable(inner):
                visit(inner, depth + 1)
        code = getattr(fn, "__code__", None)
        if isinstance(code, types.CodeType):
            if code.co_filename == mod.__file__:
                add(code)
            return
        if isinstance(obj, type) and obj.__module__ == mod.__name__:
            for member in list(vars(obj).values()):
                if isinstance(member, property):
                    for f in (member.fget, member.fset, member.fdel):
                        if f is not None:
                            visit(f, depth + 1)
                else:
                    visit(member, depth + 1)
        elif isinstance(obj, dict) and depth == 0:
            for v in list(obj.values()):
                visit(v, depth + 1)
        elif isinstance(obj, (list, tuple)) and depth == 0:
            for v in obj:
                visit(v, depth + 1)

    for value in list(vars(mod).values()):
        visit(value, 0)
    return out


# Modules the failing call may pass through: jax's, the judge's, numpy's and the standard library's. A
# module the candidate brought (its directory, or any other path it put on sys.path) is not among them.
_TRUSTED_PACKAGES = ("jax", "jaxlib", "numpy", "ml_dtypes", "maxkernel.tpu_tools")


def _trusted(mod: types.ModuleType, path: Path) -> bool:
    if mod.__name__.split(".")[0] in _TRUSTED_PACKAGES[:-1] or mod.__name__.startswith(_TRUSTED_PACKAGES[-1]):
        return True
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    return path.is_relative_to(stdlib) and "site-packages" not in path.parts


class _Genuine:
    """Whether a frame runs a code object of the loaded module at its file (not one compiled under that
    file's name, not the candidate's own module)."""

    def __init__(self, candidate: Path):
        self.candidate_dir = candidate.resolve().parent
        self.files = _files()
        self.codes: dict[str, set[int]] = {}

    def __call__(self, code: types.CodeType) -> bool:
        try:
            path = Path(code.co_filename).resolve()
        except OSError:
            return False
        if path.parent == self.candidate_dir:
            return False
        mod = self.files.get(str(path))
        if mod is None or not _trusted(mod, path):
            return False
        key = str(path)
        if key not in self.codes:
            self.codes[key] = _codes_of(mod)
        return id(code) in self.codes[key]


def _is_interpreter(filename: str) -> bool:
    f = filename.replace("\\", "/")
    return "/jax/" in f and any(part in f for part in INTERPRETER_PARTS)


def _chain(exc: BaseException) -> list[BaseException]:
    seen, out = set(), []
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


@dataclasses.dataclass(frozen=True)
class InterpreterFailure:
    """Where the interpreter failed: the jax function that raised, and the error's own line."""

    function: str  # module.function that raised (jax's)
    entry: str  # the interpreter function the failing call went through
    error: str  # the innermost real error, one line
    vetoed: str = ""  # why it is not the interpreter's after all: the candidate's own host code ran


def _from_traceback(exc: BaseException, candidate: Path) -> InterpreterFailure | None:
    """From the live traceback: an interpreter frame, and every frame (the judge's call included) a
    genuine code object of a loaded module that is not the candidate's."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    genuine = _Genuine(candidate)
    entry = next((c for c in frames if _is_interpreter(c.co_filename) and genuine(c)), None)
    if entry is None or not all(genuine(c) for c in frames):
        return None
    # while lowering, the interpreter is entered from pallas_call's own lowering rule, nowhere else
    lowering = [i for i, c in enumerate(frames) if c.co_name == "_pallas_call_lowering"]
    if lowering and not (
        frames[lowering[0]].co_filename.endswith("pallas/pallas_call.py")
        and frames.index(entry) > lowering[0]
    ):
        return None
    raiser = frames[-1]
    if not _is_jax(raiser.co_filename):
        return None
    return InterpreterFailure(
        function=f"{_short(raiser.co_filename)}.{raiser.co_name}",
        entry=f"{_short(entry.co_filename)}.{entry.co_name}",
        error=_one_line(f"{type(exc).__name__}: {exc}"),
    )


def _is_jax(filename: str) -> bool:
    root = _jax_root()
    try:
        return root is not None and Path(filename).resolve().is_relative_to(root)
    except OSError:
        return False


def _short(filename: str) -> str:
    f = filename.replace("\\", "/")
    tail = f.split("/jax/", 1)[-1].removesuffix(".py").replace("/", ".")
    return "jax." + tail


def _one_line(text: str, limit: int = 400) -> str:
    for raw in text.strip().splitlines():
        if line := raw.strip():
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def callback_error(text: str) -> tuple[list[tuple[str, int, str]], str] | None:
    """(the frames, the innermost real error line) of a Python traceback XLA embedded in a callback
    error ("CpuCallback error: Traceback (most recent call last): ..."), or None where there is none."""
    start = text.rfind("Traceback (most recent call last):")
    if start < 0:
        return None
    body = text[start:]
    frames = [(m[1], int(m[2]), m[3]) for m in _CALLBACK_FRAME.finditer(body)]
    error = ""
    for raw in body.splitlines()[1:]:
        line = raw.rstrip()
        # the error line: not indented, not a frame or its source line, not a caret line
        if line and not line.startswith((" ", "\t")) and not line.startswith("Traceback"):
            error = line.strip()
            break
    if not error:
        return None
    return frames, _one_line(error)


def _from_callback(exc: BaseException, candidate: Path) -> InterpreterFailure | None:
    parsed = callback_error(str(exc))
    if parsed is None:
        return None
    frames, error = parsed
    if not frames or not _is_interpreter(frames[0][0]) and not any(_is_interpreter(f) for f, _, _ in frames):
        return None
    root = _jax_root()
    for filename, _, _ in frames:
        try:
            path = Path(filename).resolve()
        except OSError:
            return None
        if root is None or not path.is_relative_to(root) or path.parent == candidate.parent:
            return None
    entry = next(f for f in frames if _is_interpreter(f[0]))
    raiser = frames[-1]
    return InterpreterFailure(
        function=f"{_short(raiser[0])}.{raiser[2]}",
        entry=f"{_short(entry[0])}.{entry[2]}",
        error=error,
    )


def interpreter_failure(
    exc: BaseException, candidate: Path, program, rules_before: dict[tuple[str, Any], Any]
) -> InterpreterFailure | None:
    """The interpreter's failure, or None where the candidate (or anything but jax) may have raised it;
    `vetoed` set where it looks like the interpreter's but the candidate's own host code may have raised it.

    `program`: the candidate's traced program (a ClosedJaxpr); `rules_before`: `lowering_rules()` before
    the candidate was imported. Where the program holds Python of the candidate's that runs after
    tracing (`own_host_code`), nothing is the interpreter's."""
    found = next(
        (f for e in _chain(exc) if e.__traceback__ is not None and (f := _from_traceback(e, candidate))), None
    )
    if found is None:
        found = next((f for e in _chain(exc) if (f := _from_callback(e, candidate)) is not None), None)
    if found is None or program is None:
        return None
    if (own := own_host_code(program, rules_before)) is not None:
        return dataclasses.replace(found, vetoed=own)
    return found
