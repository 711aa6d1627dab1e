"""12p RMSNorm: Llama-3.1-70B RMSNorm over the embedding axis (sheet §5, 12p).

The normalisation runs in f32 (eps as f32); the result is cast to the input dtype *before* the
multiply by ``scale``, which is therefore a bf16 multiply.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"batch": 8, "seq_len": 4096, "emb_dim": 8192},
    "small": {"batch": 2, "seq_len": 128, "emb_dim": 1024},
}

CONFIG = {
    "name": "llama3_70b_rmsnorm",
    "model": "Llama-3.1-70B",
    "operator": "rms_norm",
    **SIZES["full"],
    "epsilon": 1e-5,
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, S, D] ~ N(0,1); scale [D] = N(0,1)·0.1 + 1 (computed in the input dtype)."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    k1, k2 = split(make_key(key, SEED), 2)
    x = normal(k1, (d["batch"], d["seq_len"], d["emb_dim"]), dtype)
    scale = normal(k2, (d["emb_dim"],), dtype, 0.1) + 1.0
    return x, scale


def workload(x: jax.Array, scale: jax.Array) -> jax.Array:
    """x · rsqrt(mean(x²) + eps) in f32, cast to x's dtype, then times scale."""
    xf = x.astype(jnp.float32)
    ms = jnp.mean(xf * xf, axis=-1, keepdims=True)
    normed = xf * jax.lax.rsqrt(ms + jnp.float32(CONFIG["epsilon"]))
    return normed.astype(x.dtype) * scale


def get_flops(size: str = "full") -> int:
    """5·B·S·D (the baseline's own get_flops)."""
    d = SIZES[size]
    return 5 * d["batch"] * d["seq_len"] * d["emb_dim"]
