"""A user reference: LayerNorm over the hidden axis of [batch, seq, hidden] bf16 activations."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "example_layernorm", "model": "example", "operator": "layer_norm", "eps": 1e-5}
SIZES = {
    "full": {"batch": 8, "seq": 2048, "hidden": 4096},
    "small": {"batch": 2, "seq": 128, "hidden": 512},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    dtype = dtype or jnp.bfloat16
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    kx, kg, kb = jax.random.split(key, 3)
    x = jax.random.normal(kx, (d["batch"], d["seq"], d["hidden"]), dtype)
    gamma = 1.0 + 0.1 * jax.random.normal(kg, (d["hidden"],), dtype)
    beta = 0.1 * jax.random.normal(kb, (d["hidden"],), dtype)
    return x, gamma, beta


def workload(x, gamma, beta):
    xf = x.astype(jnp.float32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
    y = (xf - mean) * jax.lax.rsqrt(var + CONFIG["eps"])
    return (y * gamma.astype(jnp.float32) + beta.astype(jnp.float32)).astype(x.dtype)
