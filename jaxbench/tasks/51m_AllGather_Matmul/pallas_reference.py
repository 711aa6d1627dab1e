"""Expert Pallas TPU reference for 51m: a collective matmul that overlaps the all-gather with the MXU.

Chip d holds x's row shard d and w's column shard d. At step s it multiplies the x shard it holds,
(d - s) mod D, into those rows of its output while a remote DMA passes the same shard on to its right
neighbour's other buffer slot; after D steps every shard has visited every chip. The two buffer slots
alternate, and a barrier-semaphore handshake before each send guarantees the neighbour finished
reading the slot being overwritten.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

AXIS = "x"


def _collective_matmul_kernel(x_ref, w_ref, o_ref, buf_ref, send_sem, recv_sem, *, axis: str, n_dev: int):
    # x_ref [m, K] my row shard; w_ref [K, n] my column shard; o_ref [M, n]; buf_ref [2, m, K].
    me = lax.axis_index(axis)
    right = lax.rem(me + 1, n_dev)
    left = lax.rem(me + n_dev - 1, n_dev)
    barrier = pltpu.get_barrier_semaphore()
    rows = x_ref.shape[0]
    buf_ref[0] = x_ref[...]
    for step in range(n_dev):
        slot = step % 2
        send = None
        if step < n_dev - 1:
            # My other slot is free again (last step's matmul and send are done): let my left
            # neighbour write it, and wait until my right neighbour says the same.
            pl.semaphore_signal(barrier, 1, device_id=(left,))
            pl.semaphore_wait(barrier, 1)
            send = pltpu.make_async_remote_copy(
                buf_ref.at[slot], buf_ref.at[1 - slot], send_sem, recv_sem, device_id=(right,)
            )
            send.start()
        shard = lax.rem(me + n_dev - step, n_dev)  # whose rows of x I hold now
        start = pl.multiple_of(shard * rows, 8)
        o_ref[pl.ds(start, rows), :] = jnp.dot(
            buf_ref[slot], w_ref[...], preferred_element_type=jnp.float32
        ).astype(o_ref.dtype)  # [m, n]
        if send is not None:
            send.wait()


def allgather_matmul(x: jax.Array, w: jax.Array, *, interpret=False) -> jax.Array:
    """x [M, K] sharded by rows, w [K, N] by columns -> y = x @ w [M, N] sharded by columns."""
    n_dev = jax.sharding.get_abstract_mesh().shape[AXIS]

    def per_chip(x_local, w_local):  # [m, K], [K, n]
        m, k = x_local.shape
        n = w_local.shape[1]
        return pl.pallas_call(
            functools.partial(_collective_matmul_kernel, axis=AXIS, n_dev=n_dev),
            out_shape=jax.ShapeDtypeStruct((m * n_dev, n), x_local.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[
                pltpu.VMEM((2, m, k), x_local.dtype),  # the x shard I multiply / the one arriving
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA,
            ],
            compiler_params=pltpu.CompilerParams(collective_id=0, vmem_limit_bytes=64 * 1024 * 1024),
            cost_estimate=pl.CostEstimate(
                flops=2 * m * n_dev * k * n,
                transcendentals=0,
                bytes_accessed=(m * k + k * n + m * n_dev * n) * x_local.dtype.itemsize,
            ),
            interpret=interpret,
        )(x_local, w_local)

    return jax.shard_map(
        per_chip, in_specs=(P(AXIS, None), P(None, AXIS)), out_specs=P(None, AXIS), check_vma=False
    )(x, w)


def workload(x: jax.Array, w: jax.Array) -> jax.Array:
    return allgather_matmul(x, w)
