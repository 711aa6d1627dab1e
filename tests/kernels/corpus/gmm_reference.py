"""Grouped matmul (MoE experts): rows of lhs in consecutive groups, group g multiplied by rhs[g]
(written for the corpus; the baseline for megablox's gmm)."""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "grouped_matmul",
    "model": "corpus",
    "operator": "grouped_matmul",
    "atol": 2e-2,
    "rtol": 2e-2,
}
SIZES = {
    "full": {"m": 8192, "k": 2048, "n": 1408, "groups": 8},
    "small": {"m": 512, "k": 128, "n": 128, "groups": 4},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    kl, kr, kg = jax.random.split(jax.random.key(0 if key is None else key), 3)
    dtype = dtype or jnp.bfloat16
    lhs = jax.random.normal(kl, (d["m"], d["k"]), dtype)
    rhs = jax.random.normal(kr, (d["groups"], d["k"], d["n"]), dtype)
    # random group boundaries that sum to m (groups may be empty or split a row tile)
    cuts = jnp.sort(jax.random.randint(kg, (d["groups"] - 1,), 0, d["m"] + 1))
    bounds = jnp.concatenate(
        [jnp.zeros(1, jnp.int32), cuts.astype(jnp.int32), jnp.full(1, d["m"], jnp.int32)]
    )
    return lhs, rhs, jnp.diff(bounds).astype(jnp.int32)


def workload(lhs, rhs, group_sizes):
    group_of_row = jnp.searchsorted(jnp.cumsum(group_sizes), jnp.arange(lhs.shape[0]), side="right")
    w = rhs[group_of_row]  # (m, k, n): fine at small sizes; the baseline favours clarity
    return jnp.einsum("mk,mkn->mn", lhs, w, preferred_element_type=jnp.float32)
