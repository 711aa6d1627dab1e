import jax.numpy as jnp


def computation(a, b):
    return jnp.dot(a, b, preferred_element_type=jnp.float32).astype(a.dtype)
