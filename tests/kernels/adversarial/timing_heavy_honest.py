"""Honest twin of timing_patch_judge_clock: the same ~50 ms of exact work per call, no clock patch."""

import jax
import jax.numpy as jnp


def workload(a, b):
    def body(i, acc):
        part = jnp.dot(jnp.roll(a, i, axis=0), b, preferred_element_type=jnp.float32)
        return jnp.maximum(acc, jnp.roll(part, -i, axis=0))

    init = jnp.full((a.shape[0], b.shape[1]), -jnp.inf, jnp.float32)
    return jax.lax.fori_loop(0, 192, body, init).astype(a.dtype)
