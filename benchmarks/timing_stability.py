"""How repeatable is `measure_interleaved`? Five fresh measurements of one >=5 ms CPU workload.

Prints, side by side, the coefficient of variation across the five of our median and of a naive
"mean of 20 blocked wall-clock calls" (no warm-up beyond compile, no interleaving, no rotation).
The two are run alternately so both see the same machine load. Target: ours <= 3%.

    .venv/bin/python benchmarks/timing_stability.py [--size 1024] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from maxkernel.tpu_tools.profile.timing import measure_interleaved, noise_floor


def _workload(x, w):
    h = jnp.tanh(x @ w)  # [n, n]
    return jax.nn.softmax(h @ w.T, axis=-1)


def _naive_mean_ms(f, args, calls: int = 20) -> float:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        out.append((time.perf_counter() - t0) * 1e3)
    return float(np.mean(out))


def _cv(x: list[float]) -> float:
    return float(np.std(x, ddof=1) / np.mean(x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=640)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()

    n = args.size
    f = jax.jit(_workload)
    keys = jax.random.split(jax.random.key(0), 4)
    sets = [
        (
            jax.random.normal(keys[2 * i], (n, n), jnp.float32),
            jax.random.normal(keys[2 * i + 1], (n, n)) / n**0.5,
        )
        for i in range(2)
    ]
    jax.block_until_ready(f(*sets[0]))  # compile once; both methods start warm

    ours, ours_min, naive, floors = [], [], [], []
    for i in range(args.repeats):
        st = measure_interleaved(
            {"reference": f, "reference_repeat": f}, sets, reps=args.reps, min_time_s=0.0
        )
        ours.append(st["reference"].median_ms)
        ours_min.append(st["reference"].min_ms)
        floors.append(noise_floor(st["reference"], st["reference_repeat"]).rel_spread)
        naive.append(_naive_mean_ms(f, sets[i % 2]))
        print(
            f"run {i + 1}: ours median {ours[-1]:7.2f} ms (CI {st['reference'].ci95_low_ms:.2f}-"
            f"{st['reference'].ci95_high_ms:.2f}, sample cv {st['reference'].cv:.2f})   naive mean-of-20 {naive[-1]:7.2f} ms"
        )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nload average now {load} on {os.cpu_count()} cores (a shared machine's load moves every median)")
    print(f"workload: jit(tanh(x@w) -> softmax(h@w.T)), n={n}, backend {jax.default_backend()}")
    print(f"{'':28s}{'ours (median)':>16s}{'naive (mean of 20)':>22s}{'ours (min)':>14s}")
    print(
        f"{'mean of the runs (ms)':28s}{np.mean(ours):16.2f}{np.mean(naive):22.2f}{np.mean(ours_min):14.2f}"
    )
    print(
        f"{'CV across the runs':28s}{100 * _cv(ours):15.2f}%{100 * _cv(naive):21.2f}%{100 * _cv(ours_min):13.2f}%"
    )
    print(f"noise floor |1 - ref/ref_repeat| per run: {', '.join(f'{100 * x:.1f}%' for x in floors)}")


if __name__ == "__main__":
    main()
