"""RMSNorm over the last axis with a learned scale (written for the corpus)."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "rmsnorm", "model": "corpus", "operator": "rms_norm", "atol": 1e-2, "rtol": 1e-2}
SIZES = {"full": {"rows": 8192, "hidden": 4096}, "small": {"rows": 64, "hidden": 512}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    kx, kw = jax.random.split(jax.random.key(0 if key is None else key))
    dtype = dtype or jnp.bfloat16
    return jax.random.normal(kx, (d["rows"], d["hidden"]), dtype), 1 + 0.1 * jax.random.normal(
        kw, (d["hidden"],), dtype
    )


def workload(x, w):
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6)
    return (y * w.astype(jnp.float32)).astype(x.dtype)
