"""A bfloat16 projection over a long K: XLA accumulates in f32 and rounds once, so the reference's error
against the oracle is that final rounding alone (the case where the rule's half-ulp floor decides the mean)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "bf16_long_k_projection", "model": "test", "operator": "dense_matmul"}
SIZES = {"full": {"m": 4096, "k": 10240, "n": 4096}, "small": {"m": 512, "k": 2560, "n": 512}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (s["m"], s["k"]), jnp.float32).astype(jnp.bfloat16)
    w = (jax.random.normal(kw, (s["k"], s["n"]), jnp.float32) / s["k"] ** 0.5).astype(jnp.bfloat16)
    return x, w


def workload(x, w):
    return x @ w


def get_flops(size="full"):
    s = SIZES[size]
    return 2 * s["m"] * s["k"] * s["n"]
