"""Compile and validate times of the multi-chip tasks (51m-53m) through the product's Evaluator.

For each task's Pallas reference: `compile` at full size for the 4-chip topology of tpu-v5p
(v5p:2x2x1) and tpu-v6e (v6e:2x2) on the real Mosaic compiler, then `validate` at small size on 4
CPU devices in TPU interpret mode (race detection on, remote DMAs eager), `--seeds` seeds x 2 runs.
Wall times include the pool's processes (the reference child, the candidate child, the judge).

    .venv/bin/python benchmarks/multichip_times.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import time

from maxkernel.jaxbench.registry import pallas_reference_path
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool

TASKS = ["51m_AllGather_Matmul", "52m_Reduce_Scatter", "53m_All_To_All"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    print(f"{'task':24} {'compile v5p ms':>15} {'compile v6e ms':>15} {'validate s':>11} {'runs':>5}")
    with WorkerPool(max_workers=1) as pool:
        ev = Evaluator(pool)
        pool.warm_up()
        for task in TASKS:
            kernel = str(pallas_reference_path(task))
            compiled = {}
            for target in ("tpu-v5p", "tpu-v6e"):
                r = ev.compile(kernel, task, target, "full")
                assert r.ok and r.devices == 4, r.failure
                compiled[target] = r.times.compile_ms
            t0 = time.perf_counter()
            v = ev.validate(kernel, task, "tpu-v6e", "small", seeds=args.seeds)
            mesh_s = time.perf_counter() - t0
            assert v.ok and v.devices == 4, v.failure
            print(
                f"{task:24} {compiled['tpu-v5p']:15.1f} {compiled['tpu-v6e']:15.1f} {mesh_s:11.2f} "
                f"{len(v.run_order):5d}"
            )


if __name__ == "__main__":
    main()
