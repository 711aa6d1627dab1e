"""The judge's integrity inside the candidate's process (judged side: runs next to the kernel's Python).

TPU interpret mode and its race detector need the kernel's Python, so some of our code shares a process
with the candidate. Before the candidate is imported we fingerprint what we rely on (identity and
code of every function and class method of the interpreter, the race detector, our execution and
hand-over helpers, the clocks, `jax.jit`, `jax.block_until_ready`, `np.save`, the pipe's send), and
install an audit hook that records and refuses opens, listings and imports of the hidden paths (the
reference, the task sources) and records attempts to install tracers or more audit hooks, use ctypes, or start processes (refused). After the run, any change is
`tampered` and any touch of a hidden path is `reached_reference`.

What this cannot stop is code that rewrites memory (ctypes); that is what the OS sandbox and keeping the
verdict in another process are for: nothing here decides a verdict except the race flag.
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import inspect
import os
import sys
import threading
import types

# Modules whose every function and class method is fingerprinted.
WATCHED_MODULES = (
    "jax._src.pallas.mosaic.interpret.interpret_pallas_call",
    "jax._src.pallas.mosaic.interpret.race_detection_state",
    "jax._src.pallas.mosaic.interpret.shared_memory",
    "jax._src.pallas.mosaic.interpret.vector_clock",
    "jax._src.pallas.mosaic.interpret.thread_map",
    "jax._src.pallas.mosaic.interpret.utils",
    "jax._src.pallas.pallas_call",
    "jax._src.stages",  # Compiled.as_text: the mesh check reads the HLO through it
    "maxkernel.tpu_tools.hardware.execution",
    "maxkernel.tpu_tools.hardware.mesh",
    "maxkernel.tpu_tools.pool.handover",
    "maxkernel.tpu_tools.judged.candidate_run",
    "maxkernel.tpu_tools.judged.interpreter_limits",
    "maxkernel.tpu_tools.judged.target_trace",
    "maxkernel.tpu_tools.judged.integrity",
    "maxkernel.tpu_tools.problem.kernel_program",  # the program compared across sizes
    "maxkernel.tpu_tools.problem.pallas_info",
    "maxkernel.tpu_tools.pool.child",
    "multiprocessing.connection",
)
# Single attributes we call (module, attribute).
WATCHED_ATTRS = (
    ("time", "perf_counter"),
    ("time", "perf_counter_ns"),
    ("time", "monotonic"),
    ("time", "monotonic_ns"),
    ("time", "time"),
    ("time", "time_ns"),
    ("jax", "jit"),
    ("jax", "block_until_ready"),
    ("jax", "make_jaxpr"),
    ("jax", "device_get"),
    ("numpy", "save"),
    ("numpy", "load"),
    ("numpy", "asarray"),
    ("json", "dumps"),
    ("builtins", "open"),
    ("os", "open"),
    ("os", "replace"),
    ("os", "_exit"),
)
PROGRESS_PREFIX = "integrity: "  # progress lines the parent reads as evidence
# Installing tracers or hooks, and ctypes (raw memory, C calls): no honest kernel does these (measured: none
# fire while the test kernels and the JaxBench Pallas references trace, compile and run).
_AUDITED_EVENTS = ("sys.addaudithook", "sys.settrace", "sys.setprofile", "threading.settrace")
# A process of its own would outlive the checks: refused, and recorded.
_SPAWN_EVENTS = (
    "os.fork", "os.forkpty", "os.system", "os.posix_spawn", "os.exec", "os.spawn", "subprocess.Popen", "pty.spawn",
)  # fmt: skip


def _hash_code(h, code: types.CodeType) -> None:
    """co_code is the unspecialized bytecode (marshal of a warm code object changes as it specializes)."""
    h.update(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars)).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _hash_code(h, const)
        else:
            h.update(repr(const).encode())


def _code_digest(obj) -> str:
    """Hash of a function's code, defaults and closure cells (same object, other code -> other hash)."""
    fn = inspect.unwrap(obj) if callable(obj) else obj
    code = getattr(fn, "__code__", None)
    if code is None:
        return ""
    h = hashlib.sha256()
    _hash_code(h, code)
    h.update(repr(getattr(fn, "__defaults__", None)).encode())
    h.update(repr(sorted((getattr(fn, "__kwdefaults__", None) or {}).items())).encode())
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            h.update(str(id(cell.cell_contents)).encode())
        except ValueError:  # empty cell
            h.update(b"-")
    return h.hexdigest()[:16]


def _entries(name: str, value) -> dict[str, tuple[int, str]]:
    out: dict[str, tuple[int, str]] = {}
    if inspect.isclass(value):
        out[name] = (id(value), "")
        for attr, member in list(vars(value).items()):
            target = member.__func__ if isinstance(member, classmethod | staticmethod) else member
            if isinstance(target, property):
                for part, f in (("get", target.fget), ("set", target.fset)):
                    if f is not None:
                        out[f"{name}.{attr}.{part}"] = (id(f), _code_digest(f))
            elif callable(target):
                out[f"{name}.{attr}"] = (id(target), _code_digest(target))
    elif callable(value):
        out[name] = (id(value), _code_digest(value))
    return out


# The estimator's rooms: a kernel estimated in-process must not be able to rewrite its own estimate.
ESTIMATOR_MODULES = (
    "maxkernel.tpu_tools.cost.estimate",
    "maxkernel.tpu_tools.cost.call_estimate",
    "maxkernel.tpu_tools.cost.fusions",
    "maxkernel.tpu_tools.cost.mosaic_call",
    "maxkernel.tpu_tools.cost.branches",
    "maxkernel.tpu_tools.cost.data_work",
    "maxkernel.tpu_tools.cost.block_schedule",
    "maxkernel.tpu_tools.problem.pallas_info",
    "maxkernel.tpu_tools.cost.jaxpr_cost",
    "maxkernel.tpu_tools.cost.llo_parse",
    "maxkernel.tpu_tools.cost.llo_dump",
    "maxkernel.tpu_tools.cost.analyze",
    "maxkernel.tpu_tools.cost.autotune",
    "maxkernel.tpu_tools.hardware.megacore",
    "maxkernel.tpu_tools.hardware.chips",
)


def fingerprint(extra_modules: tuple[str, ...] = ()) -> dict[str, tuple[int, str]]:
    """Identity + code hash of everything the judge relies on in this process."""
    prints: dict[str, tuple[int, str]] = {}
    for mod_name in (*WATCHED_MODULES, *extra_modules):
        try:
            module = importlib.import_module(mod_name)
        except ImportError:
            continue
        for attr, value in list(vars(module).items()):
            if attr.startswith("__") or not callable(value):
                continue
            if getattr(value, "__module__", mod_name) != mod_name and not inspect.isbuiltin(value):
                prints[f"{mod_name}.{attr}"] = (id(value), "")  # an import: identity is enough
                continue
            prints.update(_entries(f"{mod_name}.{attr}", value))
    for mod_name, attr in WATCHED_ATTRS:
        module = importlib.import_module(mod_name)
        prints.update(_entries(f"{mod_name}.{attr}", getattr(module, attr, None)))
    prints["sys.gettrace"] = (id(sys.gettrace()), "")
    prints["sys.getprofile"] = (id(sys.getprofile()), "")
    prints["gc.callbacks"] = (len(gc.callbacks), "")
    return prints


def changes(before: dict[str, tuple[int, str]], after: dict[str, tuple[int, str]]) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


class Guard:
    """Fingerprints before the candidate, an audit hook for hidden paths, and the check after the run."""

    def __init__(self, hide_paths: list[str], extra_modules: tuple[str, ...] = ()) -> None:
        self.extra_modules = tuple(extra_modules)
        self._hooked = False
        self.hidden = [os.path.realpath(p) for p in hide_paths if p]
        self.reached: list[str] = []
        self.hooks: list[str] = []
        self.before: dict[str, tuple[int, str]] = {}
        self.threads: set[int] = set()
        self._armed = False

    def _is_hidden(self, path) -> bool:
        if isinstance(path, int) or path is None:
            return False
        try:
            p = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return any(p == h or p.startswith(h.rstrip("/") + "/") for h in self.hidden)

    def _hook(self, event: str, args: tuple) -> None:
        """Record, report and refuse (raise) any touch of a hidden path; record tracer/hook installs."""
        if not self._armed:
            return
        refused: BaseException | None = None
        try:
            if event in ("open", "os.listdir", "os.scandir", "glob.glob", "shutil.copyfile", "os.chdir"):
                if args and self._is_hidden(args[0]):
                    self._record(self.reached, f"{event} {args[0]}")
                    refused = PermissionError(f"{args[0]}: hidden from the candidate by the judge")
            elif event == "import":
                module, filename = args[0], args[1] if len(args) > 1 else None
                if str(module).startswith("maxkernel.jaxbench") or self._is_hidden(filename):
                    self._record(self.reached, f"import {module}")
                    refused = ImportError(f"{module}: hidden from the candidate by the judge")
            elif event in _AUDITED_EVENTS or event.startswith("ctypes."):
                self._record(self.hooks, event)
            elif event in _SPAWN_EVENTS:
                self._record(self.hooks, event)
                refused = PermissionError(f"{event}: a candidate may not start processes")
        except Exception:  # noqa: BLE001 - a broken check must not break the candidate's honest calls
            return
        if refused is not None:
            raise refused

    def _record(self, where: list[str], what: str) -> None:
        """Kept here and sent to the parent at once: clearing our list later cannot hide it."""
        if len(where) < 20:
            where.append(what[:300])
            from maxkernel.tpu_tools.pool.child import report_progress

            kind = "reached_reference" if where is self.reached else "tampered"
            report_progress(f"{PROGRESS_PREFIX}{kind}: {what[:300]}")

    def arm(self) -> None:
        """Call just before importing the candidate (again before each one of a batch: one hook in all)."""
        self.before = fingerprint(self.extra_modules)
        self.threads = {t.ident for t in threading.enumerate() if t.ident is not None}
        if not self._hooked:  # audit hooks cannot be removed: install ours once
            sys.addaudithook(self._hook)
            self._hooked = True
        self._armed = True

    def changed_so_far(self) -> list[str]:
        """What the candidate changed up to now (the guard stays armed): before the judge trusts a tool mid-run."""
        return changes(self.before, fingerprint(self.extra_modules))

    def check(self) -> tuple[str | None, str | None]:
        """(tampered summary, reached-reference summary) after the run; None where clean."""
        self._armed = False
        changed = changes(self.before, fingerprint(self.extra_modules))
        # _DummyThread: a foreign (C-started) thread that once called into threading, as the TPU
        # interpreter's per-core worker threads do when validation splits a grid across cores.
        new_threads = [
            t.name
            for t in threading.enumerate()
            if t.ident not in self.threads and t.is_alive() and not isinstance(t, threading._DummyThread)
        ]
        problems = []
        if changed:
            problems.append(
                f"changed {len(changed)} function(s) the judge relies on: {', '.join(changed[:6])}"
            )
        if self.hooks:
            problems.append(f"used {', '.join(sorted(set(self.hooks)))}")
        if new_threads:
            problems.append(f"left {len(new_threads)} Python thread(s) running: {', '.join(new_threads[:3])}")
        tampered = "; ".join(problems) or None
        reached = None
        if self.reached:
            reached = f"the candidate reached hidden reference paths: {'; '.join(self.reached[:4])}"
        return tampered, reached


def static_patch_scan(source: str) -> list[str]:
    """A second signal, never the verdict: assignments to attributes of imported modules (monkey-patching).

    `time.perf_counter = ...`, `setattr(jax, ...)`, `race_detection_state.RaceDetectionState.check_read = ...`.
    """
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            modules.update(a.asname or a.name for a in node.names)

    def root(expr) -> str | None:
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        return expr.id if isinstance(expr, ast.Name) else None

    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and root(t) in modules:
                found.append(f"line {node.lineno}: assigns {ast.unparse(t)}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
        ):
            if node.args and root(node.args[0]) in modules:
                found.append(f"line {node.lineno}: {node.func.id}({ast.unparse(node.args[0])}, ...)")
    return found[:10]


def shipped_with_jaxbench(kernel_path: str) -> bool:
    """A program that ships inside JaxBench's tasks (bench times a task's own baseline as a candidate)."""
    from pathlib import Path

    tasks = Path(__file__).resolve().parents[2] / "jaxbench" / "tasks"  # by path: the registry is hidden here
    return Path(kernel_path).resolve().is_relative_to(tasks)


class ShippedGuard(Guard):
    """For a JaxBench-shipped program: importing JaxBench's shared helpers is its own dependency.

    Reading any file under the hidden paths (every other task's source) is still refused and reported.
    """

    def _hook(self, event: str, args: tuple) -> None:
        if event == "import" and str(args[0]).startswith("maxkernel.jaxbench"):
            filename = args[1] if len(args) > 1 else None
            if not self._is_hidden(filename):
                return
        super()._hook(event, args)
