"""The inputs for data_dependent_work.py's estimate adversaries: x @ w^count on the first `active` row
blocks of x (`order`: the row blocks in order, the table a run-time grid walks).

Its inputs carry the counts that decide the kernels' work: REPEATS matmuls per row block, and one active
row block of many (the estimate must read them from create_inputs, not from the shapes)."""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "data_dependent_work",
    "model": "adversarial",
    "operator": "matmul",
    "atol": 5e-2,
    "rtol": 5e-2,
}
SIZES = {"full": {"rows": 65536, "d": 1024}, "small": {"rows": 1024, "d": 128}}
REPEATS = {"full": 64, "small": 3}
TILE = 512


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    kx, kw = jax.random.split(jax.random.key(0 if key is None else key))
    dtype = dtype or jnp.bfloat16
    x = jax.random.normal(kx, (d["rows"], d["d"]), dtype)
    w = (jax.random.normal(kw, (d["d"], d["d"]), jnp.float32) / d["d"] ** 0.5).astype(dtype)
    order = jnp.arange(d["rows"] // TILE, dtype=jnp.int32)  # the row blocks, in order
    return x, w, jnp.array([REPEATS[size]], jnp.int32), order, jnp.array([1], jnp.int32)


def workload(x, w, count, order, active):
    del order

    def body(_, acc):
        return jnp.dot(acc, w, preferred_element_type=jnp.float32).astype(acc.dtype)

    rows = jnp.arange(x.shape[0])[:, None] < active[0] * TILE
    return jnp.where(rows, jax.lax.fori_loop(0, count[0], body, x), 0).astype(x.dtype)
