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
import functools
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
    and is not jax's own (its own primitive, or a jax primitive it re-registered). Then an error raised
    while lowering or running may be the candidate's, and is never the interpreter's.

    A rule registered after the snapshot by jax itself (a jax module the candidate's import loaded
    first, e.g. one the worker did not preload) is jax's: the primitive is one a jax module's source
    defines, every code object the rule reaches is a genuine code object of a loaded jax module, and
    nothing it closes over is anyone else's. (jax's own function registered by the candidate as the
    rule of a primitive of its own is the candidate's.)"""
    from jax._src.interpreters import mlir

    cpu_rules = mlir._platform_specific_lowerings.get("cpu", {})
    genuine: _Genuine | None = None  # built on a rule's first question: it reads every loaded module
    for eqn in _eqns(closed_jaxpr.jaxpr):
        prim, name = eqn.primitive, eqn.primitive.name
        if "callback" in name:
            return f"a host callback ({name})"
        for platform, rules in (("cpu", cpu_rules), ("", mlir._lowerings)):
            rule = rules.get(prim)
            if rule is None or before.get((platform, prim)) is rule:
                continue
            genuine = genuine or _Genuine(None)
            if not (_jax_defines(prim) and _jaxs_own(rule, genuine)):
                return f"primitive {name}, lowered by a rule registered after the candidate was imported"
    return None


def _jax_defines(prim: Any) -> bool:
    """Whether a loaded jax module binds `prim` to a name that its source file assigns at top level (a
    primitive the candidate made and planted in a jax module's namespace is in no jax source)."""
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if not (isinstance(f, str) and f.endswith(".py") and _is_jax(f, with_jaxlib=True)):
            continue
        names = [k for k, v in list(vars(mod).items()) if v is prim]
        if not names:
            continue
        try:
            text = Path(f).read_text(encoding="utf-8")
        except OSError:
            continue
        if any(re.search(rf"^{re.escape(n)}\s*(:[^=\n]*)?=", text, re.M) for n in names):
            return True
    return False


def _jaxs_own(obj: Any, genuine: _Genuine, depth: int = 0) -> bool:
    """Whether a lowering rule is jax's own through and through: functions are genuine code objects of
    jax's (or jaxlib's) loaded modules, partials and closures hold only such functions, and every other
    object they hold is of a type jax, jaxlib, numpy or the standard library defines."""
    if depth > 6:
        return False
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return True
    if isinstance(obj, (tuple, list, frozenset, set)):
        return all(_jaxs_own(x, genuine, depth + 1) for x in obj)
    if isinstance(obj, dict):
        return all(
            _jaxs_own(k, genuine, depth + 1) and _jaxs_own(v, genuine, depth + 1) for k, v in obj.items()
        )
    if isinstance(obj, functools.partial):
        return all(_jaxs_own(x, genuine, depth + 1) for x in (obj.func, obj.args, obj.keywords))
    if isinstance(obj, types.MethodType):
        return _jaxs_own(obj.__func__, genuine, depth + 1) and _jaxs_own(obj.__self__, genuine, depth + 1)
    if isinstance(obj, types.FunctionType):
        code = obj.__code__
        if not _is_jax(code.co_filename, with_jaxlib=True) or not genuine(code):
            return False
        cells = [c.cell_contents for c in obj.__closure__ or () if _cell_set(c)]
        return all(_jaxs_own(x, genuine, depth + 1) for x in (*cells, obj.__defaults__, obj.__kwdefaults__))
    if isinstance(obj, types.BuiltinFunctionType):
        return (getattr(obj, "__module__", "") or "").split(".")[0] in _TRUSTED_PACKAGES[:-1]
    module = (getattr(type(obj), "__module__", "") or "").split(".")[0]
    if module not in (*_TRUSTED_PACKAGES[:-1], "builtins", "functools", "enum", "dataclasses"):
        return False
    # a jax object may hold the rule (mlir's LoweringRuleEntry): what it holds must be jax's too
    held = (
        [getattr(obj, f.name, None) for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else []
    )
    held += list(getattr(obj, "__dict__", {}).values())
    if callable(obj) and type(obj).__call__ is not type.__call__:
        held.append(type(obj).__call__)
    return all(_jaxs_own(x, genuine, depth + 1) for x in held)


def _cell_set(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


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
    return _stdlib(path)


class _Genuine:
    """Whether a frame runs a code object of the loaded module at its file (not one compiled under that
    file's name, not the candidate's own module)."""

    def __init__(self, candidate: Path | None):
        self.candidate_dir = candidate.resolve().parent if candidate is not None else None
        self.files = _files()
        self.codes: dict[str, set[int]] = {}

    def __call__(self, code: types.CodeType) -> bool:
        try:
            path = Path(code.co_filename).resolve()
        except OSError:
            return False
        if self.candidate_dir is not None and path.parent == self.candidate_dir:
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


def _from_traceback(exc: BaseException, candidate: Path, notes: list[str]) -> InterpreterFailure | None:
    """From the live traceback: an interpreter frame, and every frame (the judge's call included) a
    genuine code object of a loaded module that is not the candidate's. `notes` gets why not, where an
    interpreter frame was there."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    genuine = _Genuine(candidate)
    entry = next((c for c in frames if _is_interpreter(c.co_filename) and genuine(c)), None)
    if entry is None:
        return None
    if bad := next((c for c in frames if not genuine(c)), None):
        notes.append(f"the call passed through {_where(bad.co_filename)}:{bad.co_name}, not jax's own code")
        return None
    # while lowering, the interpreter is entered from pallas_call's own lowering rule, nowhere else
    lowering = [i for i, c in enumerate(frames) if c.co_name == "_pallas_call_lowering"]
    if lowering and not (
        frames[lowering[0]].co_filename.endswith("pallas/pallas_call.py")
        and frames.index(entry) > lowering[0]
    ):
        notes.append("the interpreter was not entered from pallas_call's lowering rule")
        return None
    raiser = frames[-1]
    if not _is_jax(raiser.co_filename):
        notes.append(f"it was raised in {_where(raiser.co_filename)}, not in jax")
        return None
    return InterpreterFailure(
        function=f"{_short(raiser.co_filename)}.{raiser.co_name}",
        entry=f"{_short(entry.co_filename)}.{entry.co_name}",
        error=_one_line(f"{type(exc).__name__}: {exc}"),
    )


def _where(filename: str) -> str:
    """A file as a reader places it: jax's modules by name, others by their last two path parts."""
    if "/jax/" in filename.replace("\\", "/"):
        return _short(filename)
    return "/".join(Path(filename).parts[-2:])


@functools.cache
def _stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"]).resolve()


def _stdlib(path: Path) -> bool:
    return path.is_relative_to(_stdlib_root()) and "site-packages" not in path.parts


def _is_jax(filename: str, *, with_jaxlib: bool = False) -> bool:
    roots = [_jax_root()]
    if with_jaxlib and (lib := sys.modules.get("jaxlib")) is not None and getattr(lib, "__file__", None):
        roots.append(Path(lib.__file__).resolve().parent)
    try:
        path = Path(filename).resolve()
    except OSError:
        return False
    return any(root is not None and path.is_relative_to(root) for root in roots)


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


def _callback_frames(frames: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """The frames of the callback itself: from jax's callback dispatcher (`_src/callback.py`, where XLA
    enters Python) down. When XLA runs the callback on the thread that called the program, the text
    also holds that thread's stack above the dispatcher (the process's bootstrap, the judge's own call
    into jax): that is the caller, not the callback."""
    is_dispatch = [f.replace("\\", "/").endswith("/jax/_src/callback.py") for f, _, _ in frames]
    if not any(is_dispatch):
        return frames
    last = max(i for i, d in enumerate(is_dispatch) if d)
    start = last
    while start > 0 and is_dispatch[start - 1]:
        start -= 1
    return frames[start:]


def _from_callback(exc: BaseException, candidate: Path, notes: list[str]) -> InterpreterFailure | None:
    """From a traceback XLA embedded as text: the interpreter's frames, every frame in jax (or the
    standard library, which jax's callbacks may pass through), the innermost in jax."""
    parsed = callback_error(str(exc))
    if parsed is None:
        return None
    frames, error = parsed
    if not any(_is_interpreter(f) for f, _, _ in frames):
        return None
    for filename, _, name in _callback_frames(frames):
        try:
            path = Path(filename).resolve()
        except OSError:
            notes.append(f"a frame's file cannot be read ({filename})")
            return None
        if path.parent == candidate.resolve().parent or not (_is_jax(filename) or _stdlib(path)):
            notes.append(f"the callback passed through {_where(filename)}:{name}, not jax's own code")
            return None
    raiser = frames[-1]
    if not _is_jax(raiser[0]):
        notes.append(f"it was raised in {_where(raiser[0])}, not in jax")
        return None
    entry = next(f for f in frames if _is_interpreter(f[0]))
    return InterpreterFailure(
        function=f"{_short(raiser[0])}.{raiser[2]}",
        entry=f"{_short(entry[0])}.{entry[2]}",
        error=error,
    )


def interpreter_failure(
    exc: BaseException, candidate: Path, program, rules_before: dict[tuple[str, Any], Any]
) -> InterpreterFailure | None:
    """The interpreter's failure, or None where the candidate (or anything but jax) may have raised it;
    `vetoed` set where it looks like the interpreter's but the candidate's own host code may have raised
    it, or where an interpreter frame was in the failing call but something else rules it out.

    `program`: the candidate's traced program (a ClosedJaxpr); `rules_before`: `lowering_rules()` before
    the candidate was imported. Where the program holds Python of the candidate's that runs after
    tracing (`own_host_code`), nothing is the interpreter's."""
    notes: list[str] = []
    chain = _chain(exc)
    found = next(
        (f for e in chain if e.__traceback__ is not None and (f := _from_traceback(e, candidate, notes))),
        None,
    )
    if found is None:
        found = next((f for e in chain if (f := _from_callback(e, candidate, notes)) is not None), None)
    if found is None and notes and program is not None:  # it looked like the interpreter's: say why not
        return InterpreterFailure(function="", entry="", error="", vetoed=notes[0])
    if found is None or program is None:
        return None
    if (own := own_host_code(program, rules_before)) is not None:
        return dataclasses.replace(found, vetoed=f"the program holds {own}, which may have raised it")
    return found


def interpreter_raised(exc: BaseException, source: Path) -> InterpreterFailure | None:
    """Whether jax's interpreter itself raised `exc` (the same reading of the traceback as
    `interpreter_failure`), for a trusted program: a Pallas reference, whose host code is the user's own
    and is not what is being judged."""
    notes: list[str] = []
    chain = _chain(exc)
    found = next(
        (f for e in chain if e.__traceback__ is not None and (f := _from_traceback(e, source, notes))), None
    )
    if found is not None:
        return found
    for e in chain:
        # XLA's text may hold the callback's traceback twice, the second cut short of the interpreter's
        # frames: each is read, innermost first
        text = str(e)
        parts = text.split("Traceback (most recent call last):")
        for i in range(len(parts) - 1, 0, -1):
            one = RuntimeError("Traceback (most recent call last):" + parts[i])
            if (f := _from_callback(one, source, notes)) is not None:
                return f
    for e in chain:
        if (f := _cut_callback(e) or _no_cpu_rule(e)) is not None:
            return f
    return None


def _cut_callback(exc: BaseException) -> InterpreterFailure | None:
    """A host-callback error whose every frame is jax's, where XLA's message kept only the innermost frames
    (51p's indexed DMA: the interpreter's own frames went to the log, not the exception). For a trusted
    program run interpreted, its callbacks are the interpreter's."""
    parsed = callback_error(str(exc))
    if parsed is None or not parsed[0] or not all(_is_jax(f) for f, _, _ in parsed[0]):
        return None
    frames, error = parsed
    return InterpreterFailure(
        function=f"{_short(frames[-1][0])}.{frames[-1][2]}",
        entry="a host callback of the interpreted kernel (XLA's message kept only its innermost frames)",
        error=error,
    )


_NO_CPU_RULE = re.compile(r"MLIR translation rule for primitive '(\w+)' not found for platform cpu")


def _no_cpu_rule(exc: BaseException) -> InterpreterFailure | None:
    """A TPU-only primitive (55p's SparseCore parallel_loop) that jax cannot lower for the CPU it interprets on."""
    m = _NO_CPU_RULE.search(str(exc)) if isinstance(exc, NotImplementedError) else None
    if m is None:
        return None
    import jax

    return InterpreterFailure(
        function=f"CPU lowering (jax {jax.__version__})",
        entry="the interpreted program's lowering",
        error=f"its primitive {m.group(1)!r} (TPU-only: SparseCore kernels use it) has no CPU lowering",
    )
