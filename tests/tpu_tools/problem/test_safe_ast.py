"""Our AST parsing never runs in two threads at once (CPython 3.11 < 3.11.8 corrupts it: gh-106905)."""

from __future__ import annotations

import ast
import threading
import time

from maxkernel.tpu_tools.examples.parse import reference_primitives
from maxkernel.tpu_tools.problem import safe_ast

SOURCE = "import jax\n\ndef workload(x):\n    return jax.numpy.tanh(x) + 1\n"


def test_parses_from_many_threads_never_overlap(monkeypatch):
    inside, most = [0], [0]
    real = ast.parse

    def watched(*args, **kwargs):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.002)  # widen the window two unlocked parses would share
        try:
            return real(*args, **kwargs)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(ast, "parse", watched)
    calls = [lambda: safe_ast.parse(SOURCE), lambda: safe_ast.literal_eval("(1, (2, 3))")]
    calls.append(lambda: reference_primitives(SOURCE))  # find_examples' parse, as the server threads run it
    threads = [threading.Thread(target=calls[i % 3]) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1
