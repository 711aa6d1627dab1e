"""A deep residual chain in bfloat16: eight layers of x = x + gelu(x @ w[i]), weights at the usual init scale.

Every op rounds to bfloat16 as XLA runs it (the dot accumulates in f32 and rounds its output), so the
reference's own error against the upcast oracle grows over the eight layers; a kernel that quantizes only
the last layers hides its int8 noise under that accumulated error unless the rule sees it (issue 43's
held-out cheat: tests/kernels/numerics/deep_chain_int8_tail_kernel.py; honest twin: deep_chain_honest_kernel.py).
"""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "deep_residual_chain",
    "model": "test",
    "operator": "mlp",
    "dtype": "bfloat16",
    "atol": 2e-2,
    "rtol": 2e-2,
}
SIZES = {
    "full": {"rows": 8192, "d": 4096, "layers": 8},
    "small": {"rows": 128, "d": 256, "layers": 8},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    dtype = dtype or jnp.bfloat16
    kx, kw = jax.random.split(jax.random.key(0) if key is None else key)
    x = jax.random.normal(kx, (s["rows"], s["d"]), jnp.float32).astype(dtype)
    w = (jax.random.normal(kw, (s["layers"], s["d"], s["d"]), jnp.float32) / s["d"] ** 0.5).astype(dtype)
    return x, w


def workload(x, w):
    for i in range(w.shape[0]):
        x = x + jax.nn.gelu(x @ w[i])
    return x


def get_flops(size="full"):
    s = SIZES[size]
    return 2 * s["layers"] * s["rows"] * s["d"] * s["d"]
