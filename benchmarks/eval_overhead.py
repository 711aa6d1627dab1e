"""Evaluations per minute through the warm worker pool vs a fresh `python -c` per evaluation, for each
OS sandbox tier this host runs (none, namespaces, bwrap; see tpu_tools/pool/sandbox.py).

Not a test: prints figures. Each tier runs in its own process (the forkserver, and so its sandbox, is
one per process): `--tier T` measures one, without it every available tier is measured in turn. The evaluation is selectable (`--job module:function`, JSON `--kwargs`) so it
can point at the real validate job; the default builds small inputs, runs a tiny Pallas matmul in TPU
interpret mode and compares it to jnp. Also prints the median libtpu compile time (compile-only v6e
devices) of a small Pallas matmul, measured inside a pool child.

    .venv/bin/python benchmarks/eval_overhead.py [--job eval_overhead:tiny_pallas_eval] [-n 8] [--tier bwrap]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _matmul(interpret, block: int = 128, n: int = 256):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    def matmul(x, y):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((n, n), jnp.float32),
            grid=(n // block, n // block),
            # x is (n, n): load the [block, n] row panel for this i-tile
            in_specs=[
                pl.BlockSpec((block, n), lambda i, j: (i, 0)),
                # y is (n, n): load the [n, block] column panel for this j-tile
                pl.BlockSpec((n, block), lambda i, j: (0, j)),
            ],
            out_specs=pl.BlockSpec((block, block), lambda i, j: (i, j)),
            interpret=interpret,
        )(x, y)

    return matmul


def tiny_pallas_eval(n: int = 256, seed: int = 0) -> dict:
    """A small representative evaluation: inputs, TPU-interpret Pallas matmul, compare to jnp."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental.pallas import tpu as pltpu

    t0 = time.perf_counter()
    kx, ky = jax.random.split(jax.random.key(seed))
    x = jax.random.normal(kx, (n, n), jnp.float32)
    y = jax.random.normal(ky, (n, n), jnp.float32)
    got = jax.block_until_ready(jax.jit(_matmul(pltpu.InterpretParams()))(x, y))
    want = jnp.dot(x, y, precision=jax.lax.Precision.HIGHEST)
    err = float(np.max(np.abs(np.asarray(got) - np.asarray(want))))
    return {"max_abs_err": err, "ok": err < 1e-3, "job_s": time.perf_counter() - t0}


def small_jit(seed: int = 0) -> dict:
    """The smallest evaluation that still uses jax: one tiny jit. Measures pure per-evaluation overhead."""
    import jax
    import jax.numpy as jnp

    t0 = time.perf_counter()
    value = float(jax.jit(lambda x: jnp.sum(x * 2.0))(jnp.arange(8.0) + seed))
    return {"value": value, "job_s": time.perf_counter() - t0}


def topology_compile_times(repeats: int = 5, topology: str = "v6e:2x2") -> dict:
    """libtpu compile (lower + Mosaic compile, compile-only devices) of a fresh small Pallas matmul, N times."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    t0 = time.perf_counter()
    topo = topologies.get_topology_desc(topology, "tpu")
    topology_s = time.perf_counter() - t0
    sharding = NamedSharding(Mesh(np.array(topo.devices[:1]), ("x",)), PartitionSpec())
    arg = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=sharding)
    times = []
    for _ in range(repeats):
        fn = _matmul(False)  # a new function object each time: no jit cache hit
        t = time.perf_counter()
        jax.jit(fn).trace(arg, arg).lower().compile()
        times.append(time.perf_counter() - t)
    return {"topology_s": topology_s, "compile_s": times, "device_kind": topo.devices[0].device_kind}


def _fresh_process(fn: str, kwargs: dict) -> tuple[float, dict]:
    module, _, func = fn.partition(":")
    code = (
        f"import sys, json, importlib; sys.path[:0] = {[HERE, *sys.path]!r}; "
        f"print(json.dumps(getattr(importlib.import_module({module!r}), {func!r})(**json.loads({json.dumps(kwargs)!r}))))"
    )
    env = {**os.environ, "TPU_WORKER_HOSTNAMES": "localhost", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    elapsed = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"fresh-process evaluation failed:\n{proc.stderr[-2000:]}")
    return elapsed, json.loads(proc.stdout.strip().splitlines()[-1])


def _measure(fn: str, kwargs: dict, n: int) -> dict:
    from maxkernel.tpu_tools.pool.workers import JobSpec, WorkerPool

    spec = JobSpec(fn=fn, kwargs=kwargs, timeout_s=300)
    with WorkerPool(max_workers=1) as pool:
        t = time.perf_counter()
        pool.warm_up()
        first = pool.run(spec)
        cold_s = time.perf_counter() - t
        if first.status != "ok":
            raise SystemExit(f"job failed in the pool: {first.message}\n{first.detail[-2000:]}")
        pool_s, job_s, fresh = [], [], []
        # Interleaved with the fresh-process runs, so both see the same load on a shared box.
        for i in range(n):
            t = time.perf_counter()
            out = pool.run(spec)
            pool_s.append(time.perf_counter() - t)
            assert out.status == "ok", out.message
            job_s.append(out.result.get("job_s", 0.0))
            if i % 2 == 0 or len(fresh) < 3:
                fresh.append(_fresh_process(fn, kwargs))
    with WorkerPool(max_workers=2) as pool2:
        t = time.perf_counter()
        handles = [pool2.submit(spec) for _ in range(n)]
        assert all(h.wait().status == "ok" for h in handles)
        two_workers_s = time.perf_counter() - t
    return {
        "result": out.result,
        "cold_s": cold_s,
        "pool_s": statistics.median(pool_s),
        "job_s": statistics.median(job_s),
        "two_workers_per_min": n / two_workers_s * 60,
        "fresh_s": statistics.median(t for t, _ in fresh),
        "fresh_job_s": statistics.median(r.get("job_s", 0.0) for _, r in fresh),
    }


def _print(fn: str, kwargs: dict, m: dict) -> None:
    print(f"job {fn} {json.dumps(kwargs) if kwargs else ''} -> {json.dumps(m['result'])}")
    print(f"  pool, first evaluation (incl. forkserver start + jax import if first): {m['cold_s']:5.2f} s")
    print(f"  warm pool, 1 worker : median {m['pool_s']:5.2f} s/eval -> {60 / m['pool_s']:6.1f} evals/min")
    print(f"  warm pool, 2 workers: {m['two_workers_per_min']:6.1f} evals/min")
    print(f"  fresh python -c     : median {m['fresh_s']:5.2f} s/eval -> {60 / m['fresh_s']:6.1f} evals/min")
    print(f"  ratio fresh / warm pool (1 worker): {m['fresh_s'] / m['pool_s']:.1f}x")
    pool_over, fresh_over = m["pool_s"] - m["job_s"], m["fresh_s"] - m["fresh_job_s"]
    print(
        f"  overhead outside the job function: pool {pool_over:.2f} s, fresh {fresh_over:.2f} s "
        f"({fresh_over / max(pool_over, 1e-3):.1f}x); job itself {m['job_s']:.2f} s in pool, "
        f"{m['fresh_job_s']:.2f} s fresh"
    )


def _available_tiers() -> list[str]:
    from maxkernel.tpu_tools.pool import sandbox

    tiers = ["none"]
    for tier in ("namespaces", "bwrap"):
        try:
            sandbox._detect(tier)
            tiers.append(tier)
        except sandbox.SandboxUnavailable as e:
            print(f"tier {tier}: unavailable here ({e})")
    return tiers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tier", choices=["none", "namespaces", "bwrap"], help="measure this sandbox tier only"
    )
    parser.add_argument("--job", default="eval_overhead:tiny_pallas_eval", help="module:function to evaluate")
    parser.add_argument("--kwargs", default="{}", help="JSON kwargs for the job")
    parser.add_argument(
        "-n",
        type=int,
        default=8,
        help="evaluations through the pool (fresh processes: every other one, at least 3)",
    )
    parser.add_argument("--compiles", type=int, default=5)
    args = parser.parse_args()
    kwargs = json.loads(args.kwargs)
    if args.tier is None:
        for tier in _available_tiers():
            print(f"==== sandbox tier: {tier}", flush=True)
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--tier", tier], check=False)
        return
    os.environ["MAXKERNEL_SANDBOX"] = args.tier

    from maxkernel.tpu_tools.pool.workers import JobSpec, WorkerPool

    with WorkerPool(max_workers=1) as pool:
        pool.warm_up()
        empty = JobSpec(fn="maxkernel.tpu_tools.pool.child:noop_job")
        times = []
        for _ in range(max(args.n, 10) * 2):
            t = time.perf_counter()
            assert pool.run(empty).status == "ok"
            times.append(time.perf_counter() - t)
        print(
            f"empty job through the pool ({pool.sandbox.tier}: fork + sandbox set-up + teardown): median "
            f"{statistics.median(times) * 1000:.1f} ms, min {min(times) * 1000:.1f} ms over {len(times)}"
        )
    for fn, kw in ((args.job, kwargs), ("eval_overhead:small_jit", {})):
        _print(fn, kw, _measure(fn, kw, args.n))
    with WorkerPool(max_workers=1) as pool:
        compiled = pool.run(
            JobSpec(fn="eval_overhead:topology_compile_times", kwargs={"repeats": args.compiles})
        )
    if compiled.status == "ok":
        c = compiled.result
        print(
            f"libtpu compile, small Pallas matmul for {c['device_kind']}: median "
            f"{statistics.median(c['compile_s']) * 1000:.0f} ms over {len(c['compile_s'])} "
            f"(first {c['compile_s'][0] * 1000:.0f} ms; topology {c['topology_s'] * 1000:.0f} ms)"
        )
    else:
        print(f"libtpu compile: {compiled.status}: {compiled.message}")


if __name__ == "__main__":
    main()
