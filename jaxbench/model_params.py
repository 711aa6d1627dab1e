"""Parameters for a library model used unmodified: shaped by the library's own init, drawn here.

A library's init may start biases and norm scales at one constant (zero, one); drawn that way, a kernel that
drops a bias or a scale would pass. Weights get N(0, 1/fan_in) (unit-variance activations), vectors N(0, 0.1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def draw_like_init(key, shapes):
    """`shapes`: the pytree of ShapeDtypeStructs the library's init gives (traced abstractly: cheap).
    With a concrete key numpy draws the values (no XLA compile per shape on CPU); under a trace, jax does."""
    leaves, tree = jax.tree_util.tree_flatten(shapes)
    std = [s.shape[-2] ** -0.5 if len(s.shape) >= 2 else 0.1 for s in leaves]
    if isinstance(key, jax.core.Tracer):
        ks = jax.random.split(key, len(leaves))
        out = [sd * jax.random.normal(k, s.shape, s.dtype) for k, s, sd in zip(ks, leaves, std, strict=True)]
    else:
        rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
        out = [
            jnp.asarray(sd * rng.standard_normal(s.shape), s.dtype) for s, sd in zip(leaves, std, strict=True)
        ]
    return jax.tree_util.tree_unflatten(tree, out)
