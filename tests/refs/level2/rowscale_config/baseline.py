"""A level-2-style file of our own (CONFIG, TUNED_PARAMS, create_inputs(dtype), workload): a Pallas row scale.

Written the way upstream JaxBench level 2 writes its baselines, so the loader is tested on that form without
copying any of them: the workload asks the chip for its lane count while it traces.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CONFIG = {
    "name": "rowscale_l2",
    "model": "test",
    "operator": "rowscale",
    "rows": 4096,
    "cols": 1024,
    "atol": 1e-2,
    "rtol": 1e-2,
}
TUNED_PARAMS = {"block_rows": 256}


def _kernel(x_ref, w_ref, o_ref):
    o_ref[...] = (x_ref[...].astype(jnp.float32) * w_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


def rowscale(x, w, block_rows):
    lanes = pltpu.get_tpu_info().num_lanes  # a chip query at trace time, as production kernels make
    assert x.shape[1] % lanes == 0, (x.shape, lanes)
    rows, cols = x.shape
    return pl.pallas_call(
        _kernel,
        grid=(rows // block_rows,),
        in_specs=[
            pl.BlockSpec((block_rows, cols), lambda i: (i, 0)),  # x: a band of rows
            pl.BlockSpec((1, cols), lambda i: (0, 0)),  # w: the one scale row
        ],
        out_specs=pl.BlockSpec((block_rows, cols), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x, w)


def create_inputs(dtype=jnp.bfloat16):
    k1, k2 = jax.random.split(jax.random.key(7))
    x = jax.random.normal(k1, (CONFIG["rows"], CONFIG["cols"]), dtype=dtype)
    w = jax.random.normal(k2, (1, CONFIG["cols"]), dtype=dtype)
    return x, w


def workload(x, w):
    return rowscale(x, w, TUNED_PARAMS["block_rows"])
