"""Regenerate the checked-in XLA-program dumps: `TPU_WORKER_HOSTNAMES=localhost python regenerate_xla.py OUT_DIR
[CASE ...]` (every case when none is named).

Each case is a plain-JAX program compiled for a v6e compile-only device with libtpu's LLO dump on; its
HLO text goes to OUT_DIR/<case>/program.hlo.txt and each program's final bundles, schedule analysis and
utilization beside it (the large allocation, top-level LLO, vmem report and per-program HLO files are
left out: no test reads them).
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

topo = topologies.get_topology_desc("v6e:2x2", "tpu")
rep = NamedSharding(Mesh(np.array(topo.devices[:1]), ("x",)), PartitionSpec())


def shape(s, dt):
    return jax.ShapeDtypeStruct(s, dt, sharding=rep)


def kv_loop(cache, x, w):
    """128 decode steps, each writing one slot of a 268 MB cache [8, 16384, 8, 128] bf16 (donated)."""

    def step(i, carry):
        c, h = carry
        h = jnp.tanh(h @ w)  # [8, 8, 128]
        return jax.lax.dynamic_update_slice(c, h.astype(c.dtype).reshape(8, 1, 8, 128), (0, i, 0, 0)), h

    return jax.lax.fori_loop(0, 128, step, (cache, x))


def tiny_attention(q, k, v):
    """einsum -> f32 softmax -> einsum, causal, at [1, 128, 4, 64]: a few-microsecond program."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) / q.shape[-1] ** 0.5
    s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v.astype(jnp.float32)).astype(q.dtype)


def slot_offsets(x, cu):
    """Rows of x at offsets read from cu, as 7p's per-sequence blocks do: s32[1] slices, adds, clamps and
    selects outside any fusion, which the top-level program runs on its scalar unit."""
    out = jnp.zeros_like(x)
    for i in range(4):
        rows = jnp.minimum(cu[i] + jnp.arange(1), x.shape[0] - 1)
        out = out.at[rows].add(x[rows] * 2)
    return out


CASES = {
    "v6e_kv_loop": (
        kv_loop,
        (0,),
        [((8, 16384, 8, 128), jnp.bfloat16), ((8, 8, 128), jnp.float32), ((128, 128), jnp.float32)],
    ),  # fmt: skip
    "v6e_tiny_attention": (tiny_attention, (), [((1, 128, 4, 64), jnp.bfloat16)] * 3),
    "v6e_slot_offsets": (slot_offsets, (), [((256, 128), jnp.float32), ((5,), jnp.int32)]),
}
KEEP = ("final_bundles.txt", "schedule-analysis_final_bundles.txt", "per-bundle-utilization.txt")
for name, (fn, donate, shapes) in CASES.items():
    if sys.argv[2:] and name not in sys.argv[2:]:
        continue
    args = [shape(s, d) for s, d in shapes]
    traced = jax.jit(fn, donate_argnums=donate).trace(*args)
    compiled, programs, times = compile_with_dump(fn, args, DUMP, traced)
    out = ROOT / name
    out.mkdir(parents=True, exist_ok=True)
    (out / "program.hlo.txt").write_text(compiled.as_text())
    for p in programs:
        for f in p.files:
            if f.endswith(KEEP):
                shutil.copy(DUMP / f, out / f)
    print(name, [(p.program, p.total_bundles) for p in programs], times)
