"""Regenerate the checked-in LLO dumps: `TPU_WORKER_HOSTNAMES=localhost python regenerate.py OUT_DIR`.

Each case is compiled for a v5e compile-only device with libtpu's LLO dump on; the files of each
compile are copied to OUT_DIR/<case>/ (we check in every case, without the large top-level LLO,
vmem_report.html and hlo.txt files, which no test reads).
"""

import shutil
import sys
from pathlib import Path

from maxkernel.tpu_tools.cost.llo_dump import compile_with_dump, enable_dump

ROOT = Path(sys.argv[1])
DUMP = enable_dump(ROOT / "_all")  # before jax touches the TPU backend

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import topologies  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[2] / "kernels"))
from _matmul_base import tiled_matmul  # noqa: E402
from llo_spill import workload as spill  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[2] / "kernels" / "adversarial"))
import hides_work_in_a_fori_loop as loops  # noqa: E402

topo = topologies.get_topology_desc("v5e:2x2", "tpu")
rep = NamedSharding(Mesh(np.array(topo.devices[:1]), ("x",)), PartitionSpec())


def shape(s, dt):
    return jax.ShapeDtypeStruct(s, dt, sharding=rep)


CASES = {
    "v5e_mm_bf16_128": (tiled_matmul, (shape((512, 512), jnp.bfloat16), shape((512, 512), jnp.bfloat16))),
    "v5e_spill": (spill, (shape((512, 1024), jnp.float32),)),
    # a body loop of 8 and 64 trips, the same work as 64 without a loop, a trip count known at run time
    # only, and a one-step kernel (no grid loop) whose fori_loop is its only loop
    "v5e_loop8": (loops.looped, (shape((4 * 8 * 8, 512), jnp.float32),)),
    "v5e_loop64": (loops.looped, (shape((4 * 8 * 64, 512), jnp.float32),)),
    "v5e_once64": (loops.once, (shape((4 * 8 * 64, 512), jnp.float32),)),
    "v5e_loop_dynamic": (loops.dynamic, (shape((4 * 8 * 16, 512), jnp.float32),)),
    "v5e_loop_single_step": (loops.single_step, (shape((8 * 16, 512), jnp.float32),)),
}
for name, (fn, args) in CASES.items():
    _, programs, times = compile_with_dump(fn, args, DUMP)
    out = ROOT / name
    out.mkdir(parents=True, exist_ok=True)
    for p in programs:
        for f in p.files:
            if not f.endswith((".html", "top-level-llo.txt", "hlo.txt")):
                shutil.copy(DUMP / f, out / f)
    print(name, [(p.program, p.loop_bundles, p.spill_stores) for p in programs], times)
