"""What the LLO dump adds to a compile: the same v5e compile-only compile with and without the dump flags.

Each run is a fresh process (libtpu reads its flags once per process); prints the median compile
time of each, and the time reading the dump takes (`maxkernel analyze` does both).

    .venv/bin/python benchmarks/analyze_overhead.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = r"""
import json, sys, time
from maxkernel.tpu_tools.cost.llo_dump import compile_with_dump, enable_dump
dump = enable_dump() if sys.argv[1] == "dump" else None
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec
sys.path.insert(0, sys.argv[2])
from _matmul_base import tiled_matmul
topo = topologies.get_topology_desc("v5e:2x2", "tpu")
rep = NamedSharding(Mesh(np.array(topo.devices[:1]), ("x",)), PartitionSpec())
s = jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16, sharding=rep)
jax.jit(lambda x: x + 1).trace(s).lower().compile()  # backend start-up, outside the timing
_, programs, times = compile_with_dump(lambda a, b: tiled_matmul(a, b, 256, 256, 256), [s, s], dump)
print(json.dumps({**times, "programs": len(programs)}))
"""


def run(mode: str) -> dict:
    env = dict(os.environ, TPU_WORKER_HOSTNAMES="localhost")
    env.pop("LIBTPU_INIT_ARGS", None)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CHILD)
    out = subprocess.run(
        [sys.executable, f.name, mode, str(ROOT / "tests" / "kernels")],
        capture_output=True,
        text=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    plain = [run("plain") for _ in range(args.runs)]
    dump = [run("dump") for _ in range(args.runs)]
    p = statistics.median(r["compile_ms"] for r in plain)
    d = statistics.median(r["compile_ms"] for r in dump)
    parse = statistics.median(r["parse_ms"] for r in dump)
    print(
        f"compile without dump {p:.0f} ms, with dump {d:.0f} ms (+{d - p:.0f} ms), reading it {parse:.0f} ms"
    )
    print(
        f"analyze adds {d - p + parse:.0f} ms to a {p:.0f} ms compile (median of {args.runs} fresh processes each)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
