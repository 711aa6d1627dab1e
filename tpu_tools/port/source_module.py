"""A PyTorch source executed as a fresh module with some size globals replaced: what the sizing plan measures
and what the port runs at a fitted size (its own module, so the source loader and the sizing plan share it
without importing each other)."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from types import ModuleType

_counter = itertools.count()


def load_module(path: Path, text: str, overrides: dict[str, int] | None = None) -> ModuleType:
    """The source executed as a fresh module, its named top-level integers replaced by `overrides`
    (line numbers and the file name kept: the port's comments and refusals name the source's lines)."""
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if overrides and name in overrides:
                node.value = ast.copy_location(ast.Constant(int(overrides[name])), node.value)
    module = ModuleType(f"_maxkernel_source_{next(_counter)}")
    module.__file__ = str(path)
    code = compile(tree, str(path), "exec")
    exec(code, module.__dict__)  # noqa: S102 - the user's source, as `port` always runs it
    return module
