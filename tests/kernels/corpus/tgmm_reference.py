"""Grouped transposed matmul (the MoE weight gradient): rows of x and dy in consecutive groups, group g's
output x[rows of g]^T @ dy[rows of g]; an empty group's output is zeros (written for the corpus; the
baseline for megablox's tgmm)."""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "grouped_matmul_transposed",
    "model": "corpus",
    "operator": "grouped_matmul",
    "atol": 5e-2,
    "rtol": 2e-2,
}
SIZES = {
    "full": {"m": 8192, "k": 2048, "n": 1408, "groups": 8},
    "small": {"m": 512, "k": 128, "n": 128, "groups": 4},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    kx, kd, kg = jax.random.split(jax.random.key(0 if key is None else key), 3)
    dtype = dtype or jnp.bfloat16
    x = jax.random.normal(kx, (d["m"], d["k"]), dtype)
    dy = jax.random.normal(kd, (d["m"], d["n"]), dtype)
    # random group boundaries that sum to m (groups may be empty or split a row tile)
    cuts = jnp.sort(jax.random.randint(kg, (d["groups"] - 1,), 0, d["m"] + 1))
    bounds = jnp.concatenate(
        [jnp.zeros(1, jnp.int32), cuts.astype(jnp.int32), jnp.full(1, d["m"], jnp.int32)]
    )
    return x, dy, jnp.diff(bounds).astype(jnp.int32)


def workload(x, dy, group_sizes):
    group_of_row = jnp.searchsorted(jnp.cumsum(group_sizes), jnp.arange(x.shape[0]), side="right")
    member = (group_of_row[:, None] == jnp.arange(group_sizes.shape[0])[None, :]).astype(jnp.float32)
    xg = x.astype(jnp.float32)[:, None, :] * member[:, :, None]  # (m, groups, k): x where row is in g
    return jnp.einsum("mgk,mn->gkn", xg, dy.astype(jnp.float32))
