"""The house keeps its rooms: the import graph read with `ast`, no module imported.

- No import cycles anywhere in maxkernel, the kernel templates included. An import inside a function
  counts (it is still an arrow, only a later one), and so does one under `if TYPE_CHECKING:`. Only files
  with no importable name (JaxBench's task files, loaded by path) are left out: they are data.
- The judged side (tpu_tools/judged/) never reaches, even through other modules, the judge side, the
  reference loader or JaxBench: the code that runs next to a candidate cannot read the answers.
- The judge side never reaches the candidate loader: the parent never runs candidate code.
- Arrows point down: tpu_tools never imports server or clients; server never imports clients;
  jaxbench and subagents are leaves.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("tpu_tools", "clients", "server", "subagents", "jaxbench")

JUDGED = "maxkernel.tpu_tools.judged."
JUDGE_SIDE = (
    "maxkernel.tpu_tools.judge.",
    "maxkernel.tpu_tools.profile.run",
    "maxkernel.tpu_tools.profile.reference_side",
)
CANDIDATE_LOADER = "maxkernel.tpu_tools.judged.candidate"
REFERENCE_LOADER = "maxkernel.tpu_tools.problem.reference"


def _modules() -> dict[str, Path]:
    mods = {}
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            rel = path.relative_to(ROOT / room).with_suffix("")
            if not all(
                p.isidentifier() for p in rel.parts
            ):  # data loaded by path (jaxbench/tasks/8p_GEMM.py)
                continue
            parts = [p for p in rel.parts if p != "__init__"]
            mods[".".join(["maxkernel", room, *parts])] = path
    return mods


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every maxkernel module this file imports (top level, in functions, or for type checking)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in MODULES else base)
    out = set()
    for mod in found:
        while mod and mod not in MODULES:
            mod = mod.rpartition(".")[0]
        if mod and mod != name:
            out.add(mod)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _reach(start: str) -> dict[str, list[str]]:
    """Every module reachable from `start`, with one import chain that reaches it."""
    seen = {start: [start]}
    todo = [start]
    while todo:
        cur = todo.pop()
        for nxt in sorted(GRAPH[cur]):
            if nxt not in seen:
                seen[nxt] = [*seen[cur], nxt]
                todo.append(nxt)
    return seen


def _cycles() -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read_from_every_room():
    assert len(MODULES) > 120, len(MODULES)
    assert any(m.startswith(JUDGED) for m in MODULES) and any(m.startswith(JUDGE_SIDE[0]) for m in MODULES)
    assert CANDIDATE_LOADER in MODULES and REFERENCE_LOADER in MODULES
    # the kernel templates and the modules named like data rooms are code, read like the rest
    assert {"maxkernel.clients.offline.templates.fused", "maxkernel.clients.search.templates"} <= set(MODULES)
    assert "maxkernel.tpu_tools.problem.tasks" in MODULES and "maxkernel.jaxbench.tasks" in MODULES
    # an import inside a function is an arrow too (fused.build imports the flash family when it needs it)
    assert (
        "maxkernel.clients.offline.templates.flash_program"
        in GRAPH["maxkernel.clients.offline.templates.fused"]
    )


def test_no_import_cycles():
    assert _cycles() == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(JUDGED)))
def test_the_judged_side_never_reaches_the_judge_the_reference_loader_or_jaxbench(module):
    bad = {
        m: " -> ".join(chain)
        for m, chain in _reach(module).items()
        if m.startswith(JUDGE_SIDE) or m == REFERENCE_LOADER or m.startswith("maxkernel.jaxbench")
    }
    assert bad == {}


@pytest.mark.parametrize(
    "module", sorted(m for m in MODULES if m.startswith(JUDGE_SIDE) or m.startswith("maxkernel.server"))
)
def test_the_judge_side_never_reaches_the_candidate_loader(module):
    chain = _reach(module).get(CANDIDATE_LOADER)
    assert chain is None, " -> ".join(chain)


def test_arrows_point_down():
    allowed = {
        "tpu_tools": {"tpu_tools", "jaxbench", "subagents"},
        "server": {"server", "tpu_tools", "subagents", "jaxbench"},
        "clients": set(ROOMS),
        "subagents": {"subagents"},
        "jaxbench": {"jaxbench"},
    }
    wrong = [
        f"{src} -> {dst}"
        for src, dsts in GRAPH.items()
        for dst in dsts
        if dst.split(".")[1] not in allowed[src.split(".")[1]]
    ]
    assert wrong == []


def test_a_cycle_and_a_breach_are_seen(monkeypatch):
    """The checks above can fail: a planted cycle and a planted breach are both found."""
    monkeypatch.setitem(GRAPH, "maxkernel.tpu_tools.errors", {"maxkernel.tpu_tools.reports"})
    assert any("maxkernel.tpu_tools.errors" in c for c in _cycles())
    judged = "maxkernel.tpu_tools.judged.job_env"
    monkeypatch.setitem(GRAPH, judged, {"maxkernel.tpu_tools.hardware.chips", REFERENCE_LOADER})
    assert REFERENCE_LOADER in _reach(judged)


def test_a_cycle_through_an_import_inside_a_function_is_seen(tmp_path, monkeypatch):
    """reports imports errors at the top; an errors that imports reports only inside a function still
    closes a cycle (Python runs it later, but the two modules cannot be read or moved apart)."""
    planted = tmp_path / "errors.py"
    planted.write_text("def late():\n    from maxkernel.tpu_tools import reports\n\n    return reports\n")
    name = "maxkernel.tpu_tools.errors"
    monkeypatch.setitem(GRAPH, name, _imports(name, planted))
    assert GRAPH[name] == {"maxkernel.tpu_tools.reports"}
    assert any(name in c and "maxkernel.tpu_tools.reports" in c for c in _cycles())
