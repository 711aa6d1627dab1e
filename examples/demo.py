"""`make demo`: the Auto loop, offline, on a small JaxBench task.

The orchestrator spawns a maxkernel-server over stdio and drives planner → implementer → compile
(real TPU compiler for tpu-v6e) → debug → validate (TPU interpret mode, race detection) → profile
(static estimate: no TPU here) → autotune with the built-in `offline` model. No network is used.
"""

from __future__ import annotations

import sys


def main() -> int:
    from maxkernel.clients.cli import main as orchestrate

    args = ["auto", "--reference", "12p_RMSNorm", "--size", "small", "--target", "tpu-v6e"]
    args += ["--model", "offline", "--iterations", "2", "--autotune"]
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
