"""One AdamW update of a Llama-3-8B MLP weight (f32 [4096, 14336]) with a traced step count.

The step is a 0-d int32 input, drawn from the key, so every seed has its own bias correction: a kernel
that bakes one step's value in as a constant fails at the judge's other seeds.
"""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "adamw_step_llama3_8b_mlp",
    "model": "Llama-3-8B",
    "operator": "adamw_update",
    "rows": 4096,
    "cols": 14336,
    "dtype": "float32",
    "atol": 1e-5,
    "rtol": 1e-5,
}
SIZES = {"full": {"rows": 4096, "cols": 14336}, "small": {"rows": 64, "cols": 512}}
B1, B2, EPS, LR, WEIGHT_DECAY = 0.9, 0.999, 1e-8, 1e-3, 0.01


def create_inputs(dtype=None, *, key=None, size="full"):
    """param, grad, m (first moment), v (second moment, >= 0): [rows, cols]; step: int32[] in [1, 1000]."""
    d = SIZES[size]
    dtype = dtype or jnp.float32
    key = jax.random.key(0) if key is None else key
    kp, kg, km, kv, ks = jax.random.split(key, 5)
    shape = (d["rows"], d["cols"])
    param = jax.random.normal(kp, shape, dtype)
    grad = jax.random.normal(kg, shape, dtype) * 1e-2
    m = jax.random.normal(km, shape, dtype) * 1e-2
    v = jnp.square(jax.random.normal(kv, shape, dtype)) * 1e-4
    step = jax.random.randint(ks, (), 1, 1001, jnp.int32)
    return param, grad, m, v, step


def workload(param, grad, m, v, step):
    t = step.astype(jnp.float32)
    m = B1 * m + (1.0 - B1) * grad
    v = B2 * v + (1.0 - B2) * grad * grad
    m_hat = m / (1.0 - B1**t)
    v_hat = v / (1.0 - B2**t)
    param = param - LR * (m_hat / (jnp.sqrt(v_hat) + EPS) + WEIGHT_DECAY * param)
    return param, m, v
