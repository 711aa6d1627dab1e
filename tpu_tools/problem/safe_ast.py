"""`ast.parse` and `ast.literal_eval` behind one process-wide lock.

CPython 3.11 before 3.11.8 corrupts the AST constructor's recursion counter when two threads parse at
once ("SystemError: AST constructor recursion depth mismatch", python/cpython#106905). The server runs its
tools in worker threads, so two regions' `find_examples` (or an extract beside them) parsed at once and
one tool call failed with that error in a Flax model run.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _LOCK:
        return ast.parse(source, filename)


def literal_eval(text: str) -> Any:
    with _LOCK:
        return ast.literal_eval(text)
