"""A step with a region the plain-JAX emitter cannot write (a Cholesky factorization: no `lax` form there) beside
an MLP it can: a model run keeps the first as the model has it and says why, and still ends with a report."""

import jax
import jax.numpy as jnp

SIZES = {"full": {"n": 512, "hidden": 1024}, "small": {"n": 128, "hidden": 256}}
CONFIG = {"name": "unextractable_region", "dtype": "float32", "atol": 1e-4, "rtol": 1e-4}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    k1, k2, k3 = jax.random.split(jax.random.key(0) if key is None else key, 3)
    x = jax.random.normal(k1, (d["n"], d["n"]), jnp.float32)
    w1 = jax.random.normal(k2, (d["n"], d["hidden"]), jnp.float32) / d["n"] ** 0.5
    w2 = jax.random.normal(k3, (d["hidden"], d["n"]), jnp.float32) / d["hidden"] ** 0.5
    return x, w1, w2


def workload(x, w1, w2):
    n = x.shape[0]
    with jax.named_scope("factor"):
        spd = x @ x.T / n + jnp.eye(n, dtype=x.dtype)
        chol = jax.lax.linalg.cholesky(spd, symmetrize_input=False)
    with jax.named_scope("mlp"):
        h = jax.nn.gelu(chol @ w1)
        return h @ w2
