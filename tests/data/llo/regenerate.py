import sys, functools, time, os, shutil
from pathlib import Path
root = Path(sys.argv[1]); root.mkdir(parents=True, exist_ok=True)
from maxkernel.tpu_tools.llo_dump import enable_dump, compile_with_dump
dump = enable_dump(root / "_all")
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P, Mesh
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
topo = topologies.get_topology_desc(os.environ.get("TOPO", "v5e:2x2"), "tpu")
mesh = Mesh(np.array(topo.devices[:1]), ("x",)); rep = NamedSharding(mesh, P())
def S(shape, dt): return jax.ShapeDtypeStruct(shape, dt, sharding=rep)

def mm_kernel(x_ref, y_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _(): acc_ref[...] = jnp.zeros_like(acc_ref)
    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)
    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _(): o_ref[...] = acc_ref[...].astype(o_ref.dtype)
def mm(x, y, bm=256, bn=256, bk=256, vmem=None):
    M, K = x.shape; N = y.shape[1]
    return pl.pallas_call(mm_kernel, out_shape=jax.ShapeDtypeStruct((M, N), x.dtype), grid=(M // bm, N // bn, K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)), pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)), scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"), vmem_limit_bytes=vmem))(x, y)

def spill_kernel(x_ref, o_ref):
    x = x_ref[...]
    acc = x
    for i in range(1, int(os.environ.get("SPILL_N", "3"))):
        acc = acc * jnp.roll(x, i, axis=1) + pltpu.roll(x, i, 0)
    o_ref[...] = acc
def spill(x):
    return pl.pallas_call(spill_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 64,),
        in_specs=[pl.BlockSpec((64, 1024), lambda i: (i, 0))], out_specs=pl.BlockSpec((64, 1024), lambda i: (i, 0)))(x)

def copy_kernel(x_ref, o_ref): o_ref[...] = x_ref[...]
def softmax_cheat(x):
    y = jax.nn.softmax(x, axis=-1)
    return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 256,),
        in_specs=[pl.BlockSpec((256, x.shape[1]), lambda i: (i, 0))], out_specs=pl.BlockSpec((256, x.shape[1]), lambda i: (i, 0)))(y)

cases = {
  "mm_bf16_256": (functools.partial(mm), (S((1024,1024), jnp.bfloat16), S((1024,1024), jnp.bfloat16))),
  "mm_f32_256": (functools.partial(mm), (S((1024,1024), jnp.float32), S((1024,1024), jnp.float32))),
  "spill": (spill, (S((512,1024), jnp.float32),)),
  "softmax_cheat": (softmax_cheat, (S((512,1024), jnp.float32),)),
  "mm_bf16_128": (functools.partial(mm, bm=128, bn=128, bk=128), (S((512,512), jnp.bfloat16), S((512,512), jnp.bfloat16))),
  "mm_bf16_1024_raised": (functools.partial(mm, bm=1024, bn=1024, bk=1024, vmem=40<<20), (S((2048,2048), jnp.bfloat16), S((2048,2048), jnp.bfloat16))),
  "mm_bf16_1024_vmem": (functools.partial(mm, bm=1024, bn=1024, bk=1024), (S((2048,2048), jnp.bfloat16), S((2048,2048), jnp.bfloat16))),
}
for name in (sys.argv[2:] or cases):
    fn, args = cases[name]
    try:
        c, progs, t = compile_with_dump(fn, args, dump)
    except Exception as e:
        print(name, "FAILED", type(e).__name__, str(e)[:600]); continue
    out = root / name; out.mkdir(exist_ok=True)
    for p in progs:
        for f in p.files:
            shutil.copy(dump / f, out / f)
        print(name, p.program, p.is_kernel, p.loop_bundles, p.straight_line_bundles, p.predicated_regions, p.spill_stores, p.spill_fills, p.vmem_allocated_bytes, [d.bytes for d in p.dmas_per_step], t)
