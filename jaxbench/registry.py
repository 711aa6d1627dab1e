"""Find and load JaxBench tasks by id, without importing all 50 up front."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

TASKS_DIR = Path(__file__).parent / "tasks"
MODELS_DIR = Path(__file__).parent / "models"
_MODEL_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_ID_RE = re.compile(r"^(\d+)([pkm])_\w+$")  # p: production, k: KernelBench-style, m: multi-chip


class UnknownTaskError(KeyError):
    """The caller named a task id that does not exist."""

    def __str__(self) -> str:
        return str(self.args[0])


def _sort_key(task_id: str) -> tuple[int, str]:
    m = _ID_RE.match(task_id)
    return (int(m.group(1)), task_id) if m else (10_000, task_id)


def _all_ids() -> list[str]:
    ids = []
    for p in TASKS_DIR.iterdir():
        name = p.stem if p.suffix == ".py" else p.name
        if _ID_RE.match(name) and (p.suffix == ".py" or (p / "__init__.py").exists()):
            ids.append(name)
    return sorted(ids, key=_sort_key)


def is_multichip(task_id: str) -> bool:
    """Multi-chip tasks (``51m`` …) declare a MESH and run over several devices."""
    m = _ID_RE.match(task_id)
    return bool(m and m.group(2) == "m")


def list_task_ids(*, multichip: bool = False) -> list[str]:
    """The 50 single-chip task ids in sheet order (1p … 17p, 18k … 50k); with ``multichip``, also 51m …"""
    return [t for t in _all_ids() if multichip or not is_multichip(t)]


def resolve_id(name: str) -> str:
    """Accept a full id (``8p_GEMM``), a short one (``8p``) or the name part (``GEMM``)."""
    ids = _all_ids()
    if name in ids:
        return name
    low = name.lower()
    matches = [i for i in ids if i.lower().split("_", 1)[0] == low or i.lower().split("_", 1)[-1] == low]
    if len(matches) == 1:
        return matches[0]
    hint = f"; did you mean one of {matches}?" if matches else "; `maxkernel tasks` lists them"
    raise UnknownTaskError(f"unknown JaxBench task {name!r}{hint}")


def task_path(task_id: str) -> Path:
    """The source file of a task (the module file, or the package's __init__.py)."""
    task_id = resolve_id(task_id)
    single = TASKS_DIR / f"{task_id}.py"
    return single if single.exists() else TASKS_DIR / task_id / "__init__.py"


def load_task(task_id: str) -> ModuleType:
    """Import a task module (``importlib`` accepts ids that start with a digit)."""
    return importlib.import_module(f"{__package__}.tasks.{resolve_id(task_id)}")


def load_pallas_reference(task_id: str) -> ModuleType | None:
    """The task's own Pallas kernel (an expert baseline), if it ships one."""
    task_id = resolve_id(task_id)
    if not (TASKS_DIR / task_id / "pallas_reference.py").exists():
        return None
    return importlib.import_module(f"{__package__}.tasks.{task_id}.pallas_reference")


def pallas_reference_path(task_id: str) -> Path | None:
    path = TASKS_DIR / resolve_id(task_id) / "pallas_reference.py"
    return path if path.exists() else None


# ------------------------------------------------------------------ model references (whole layers)


def list_model_ids() -> list[str]:
    """The model references (``llama3_8b_layer`` …): whole layers for ``maxkernel hotspots``."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.py") if p.stem != "__init__" and _MODEL_RE.match(p.stem))


def resolve_model(name: str) -> str:
    """A model id, exact or by a unique prefix (``llama3`` -> ``llama3_8b_layer``)."""
    ids = list_model_ids()
    if name in ids:
        return name
    matches = [i for i in ids if i.startswith(name.lower())]
    if len(matches) == 1:
        return matches[0]
    hint = f"; did you mean one of {matches}?" if matches else f"; the models are {ids}"
    raise UnknownTaskError(f"unknown JaxBench model {name!r}{hint}")


def model_path(model_id: str) -> Path:
    return MODELS_DIR / f"{resolve_model(model_id)}.py"


def load_model(model_id: str) -> ModuleType:
    return importlib.import_module(f"{__package__}.models.{resolve_model(model_id)}")
