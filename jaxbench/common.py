"""Small helpers every JaxBench task shares: seed handling and input dtypes. Keep this stable."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

KeyLike = jax.Array | int | None


def make_key(key: KeyLike, default_seed: int) -> jax.Array:
    """A typed PRNG key from ``None`` (the sheet's seed), an int seed, or an existing key.

    Raw ``uint32[2]`` keys (old-style ``jax.random.PRNGKey``) are wrapped, so both styles give the
    same inputs for the same seed.
    """
    if key is None:
        return jax.random.key(default_seed)
    if isinstance(key, int | np.integer):
        return jax.random.key(int(key))
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)


def split(key: jax.Array, n: int) -> tuple[jax.Array, ...]:
    """``n`` subkeys, in order (``split(k, n)[i]`` of the sheet)."""
    return tuple(jax.random.split(key, n))


def resolve_dtype(dtype, default) -> jnp.dtype:
    """The requested floating dtype, or the task's declared one when ``dtype`` is None."""
    return jnp.dtype(default if dtype is None else dtype)


def normal(key: jax.Array, shape: tuple[int, ...], dtype, scale: float | None = None) -> jax.Array:
    """N(0,1) sampled directly in ``dtype``, then times the Python scalar ``scale`` (rounded to dtype)."""
    x = jax.random.normal(key, shape, dtype)
    return x if scale is None else x * scale
