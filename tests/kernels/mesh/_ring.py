"""A ring reduce-scatter with one switchable defect, for the multi-chip adversarial kernels beside it."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P


def _kernel(x_ref, o_ref, acc_ref, recv_ref, send_sem, recv_sem, *, defect: str):
    me, n = lax.axis_index("x"), lax.axis_size("x")
    right, left = lax.rem(me + 1, n), lax.rem(me + n - 1, n)
    barrier = pltpu.get_barrier_semaphore()
    acc_ref[...] = x_ref[left].astype(jnp.float32)
    for step in range(x_ref.shape[0] - 1):
        pl.semaphore_signal(barrier, 1, device_id=(left,))
        pl.semaphore_wait(barrier, 1)
        # "wrong_neighbour" sends the running sum back to where it came from.
        dest = left if defect == "wrong_neighbour" else right
        send = pltpu.make_async_remote_copy(acc_ref, recv_ref, send_sem, recv_sem, device_id=(dest,))
        send.start()
        if defect == "skip_wait":
            send.wait_send()  # never waits for the neighbour's data before reading recv_ref
        else:
            send.wait()
        chunk = lax.rem(me + 2 * n - step - 2, n)
        acc_ref[...] = recv_ref[...] + x_ref[chunk].astype(jnp.float32)
    o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def reduce_scatter(partials, defect: str = "none"):
    n_dev = jax.sharding.get_abstract_mesh().shape["x"]

    def per_chip(local):
        c, n = local.shape[0] // n_dev, local.shape[1]
        return pl.pallas_call(
            functools.partial(_kernel, defect=defect),
            out_shape=jax.ShapeDtypeStruct((c, n), local.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[
                pltpu.VMEM((c, n), jnp.float32),
                pltpu.VMEM((c, n), jnp.float32),
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA,
            ],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(local.reshape(n_dev, c, n))

    return jax.shard_map(per_chip, in_specs=P("x", None), out_specs=P("x", None), check_vma=False)(partials)
