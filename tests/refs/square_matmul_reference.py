"""C = A @ B in bfloat16 at 2048^3 ('small'): big enough that 1024^3 blocks need more than v5e's 16 MiB scoped VMEM."""

import jax
import jax.numpy as jnp

CONFIG = {"name": "square_matmul", "model": "test", "operator": "dense_matmul", "atol": 2e-2, "rtol": 2e-2}
SIZES = {"full": {"n": 2048}, "small": {"n": 2048}}


def create_inputs(dtype=None, *, key=None, size="full"):
    n = SIZES[size]["n"]
    key = jax.random.key(0 if key is None else key)
    ka, kb = jax.random.split(key)
    return jax.random.normal(ka, (n, n), dtype or jnp.bfloat16), jax.random.normal(
        kb, (n, n), dtype or jnp.bfloat16
    )


def workload(a, b):
    return jnp.dot(a, b, preferred_element_type=jnp.float32).astype(a.dtype)


def get_flops(size="full"):
    return 2 * SIZES[size]["n"] ** 3
