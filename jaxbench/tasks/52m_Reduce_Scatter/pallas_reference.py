"""Expert Pallas TPU reference for 52m: a ring reduce-scatter with remote DMAs, one kernel per chip.

Chip d starts by sending its partial of chunk d-1 to its right neighbour. At each of the D-1 steps it
receives a running sum from its left neighbour, adds its own partial of that chunk (in f32) and passes
it on; after the last step the running sum it holds is chunk d, complete. Before every send the two
neighbours handshake on the barrier semaphore, so a fast chip never overwrites a receive buffer its
neighbour is still reading. Runs under the caller's mesh (`jax.set_mesh`); the one mesh axis is the ring.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

AXIS = "x"


def _reduce_scatter_kernel(x_ref, o_ref, acc_ref, recv_ref, send_sem, recv_sem, *, axis: str):
    # x_ref [D, c, N]: this chip's partial, chunk j destined for chip j.
    me = lax.axis_index(axis)
    n = lax.axis_size(axis)
    right = lax.rem(me + 1, n)
    left = lax.rem(me + n - 1, n)
    barrier = pltpu.get_barrier_semaphore()
    acc_ref[...] = x_ref[lax.rem(me + n - 1, n)].astype(jnp.float32)  # [c, N] chunk d-1 leaves first
    for step in range(x_ref.shape[0] - 1):
        # My left neighbour may write into my recv buffer; my right neighbour said the same to me.
        pl.semaphore_signal(barrier, 1, device_id=(left,))
        pl.semaphore_wait(barrier, 1)
        send = pltpu.make_async_remote_copy(acc_ref, recv_ref, send_sem, recv_sem, device_id=(right,))
        send.start()
        send.wait()  # my send left and my left neighbour's running sum arrived
        chunk = lax.rem(me + 2 * n - step - 2, n)  # the chunk that running sum belongs to
        acc_ref[...] = recv_ref[...] + x_ref[chunk].astype(jnp.float32)  # [c, N] f32
    o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def reduce_scatter(partials: jax.Array, *, interpret=False) -> jax.Array:
    """partials [D·D·c, N] sharded by rows -> the sum of the chips' partials, sharded by rows [D·c, N]."""
    n_dev = jax.sharding.get_abstract_mesh().shape[AXIS]

    def per_chip(local):  # local [D·c, N]
        c, n = local.shape[0] // n_dev, local.shape[1]
        blocks = local.reshape(n_dev, c, n)
        return pl.pallas_call(
            functools.partial(_reduce_scatter_kernel, axis=AXIS),
            out_shape=jax.ShapeDtypeStruct((c, n), local.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[
                pltpu.VMEM((c, n), jnp.float32),  # running sum I send
                pltpu.VMEM((c, n), jnp.float32),  # running sum my left neighbour sends me
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA,
            ],
            compiler_params=pltpu.CompilerParams(collective_id=0, vmem_limit_bytes=64 * 1024 * 1024),
            cost_estimate=pl.CostEstimate(
                flops=(n_dev - 1) * c * n, transcendentals=0, bytes_accessed=(n_dev + 1) * c * n * 2
            ),
            interpret=interpret,
        )(blocks)

    return jax.shard_map(per_chip, in_specs=P(AXIS, None), out_specs=P(AXIS, None), check_vma=False)(partials)


def workload(partials: jax.Array) -> jax.Array:
    return reduce_scatter(partials)
