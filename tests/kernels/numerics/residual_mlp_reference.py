"""A residual gated MLP in bfloat16, weights at the usual init scale: x + (silu(x @ wg) * (x @ wu)) @ wd.

Every op rounds to bfloat16 as XLA runs it; a kernel that keeps the gate in f32 and rounds once before the
down projection is more accurate than this reference, not less.
"""

import jax
import jax.numpy as jnp

CONFIG = {"name": "residual_gated_mlp", "model": "test", "operator": "mlp"}
SIZES = {
    "full": {"rows": 8192, "d": 2048, "f": 8192},
    "small": {"rows": 256, "d": 512, "f": 1024},
}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size]
    dtype = dtype or jnp.bfloat16
    kx, kg, ku, kd = jax.random.split(key, 4)
    x = jax.random.normal(kx, (s["rows"], s["d"]), jnp.float32).astype(dtype)
    wg = (jax.random.normal(kg, (s["d"], s["f"]), jnp.float32) / s["d"] ** 0.5).astype(dtype)
    wu = (jax.random.normal(ku, (s["d"], s["f"]), jnp.float32) / s["d"] ** 0.5).astype(dtype)
    wd = (jax.random.normal(kd, (s["f"], s["d"]), jnp.float32) / s["f"] ** 0.5).astype(dtype)
    return x, wg, wu, wd


def workload(x, wg, wu, wd):
    return x + (jax.nn.silu(x @ wg) * (x @ wu)) @ wd


def get_flops(size="full"):
    s = SIZES[size]
    return 6 * s["rows"] * s["d"] * s["f"]
