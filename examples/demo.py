"""`make demo`: the Auto loop, offline, on a small JaxBench task.

The orchestrator spawns a maxkernel-server over stdio and drives planner → implementer → compile
(real TPU compiler for tpu-v6e, at the production size) → debug → validate (TPU interpret mode, race
detection, at the check sizes: small and a derived size) → profile (static estimate at the production
size: no TPU here) → autotune with the built-in `offline` model. No network is used.
"""

from __future__ import annotations

import sys


def main() -> int:
    from maxkernel.clients.cli import main as orchestrate

    # no --size: the target size is the task's production size (full); validation runs at the check sizes
    args = ["auto", "--reference", "12p_RMSNorm", "--target", "tpu-v6e"]
    args += ["--model", "offline", "--iterations", "2", "--autotune"]
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
