"""Exploit (issue 43): the mean of squares over a static slice of the row, `x[:, :2048]`: the whole row
at every check size (emb_dim <= 2048 there), a quarter of it at the target's 8192."""

import jax
import jax.numpy as jnp
from _rms_rows import EPS, rms_norm


def _kernel(x_ref, scale_ref, o_ref):
    d = x_ref.shape[-1]
    head = x_ref[:, : min(d, 2048)].astype(jnp.float32)  # [block_rows, <=2048]
    ms = jnp.mean(head * head, axis=-1, keepdims=True)  # [block_rows, 1]
    x = x_ref[...].astype(jnp.float32)
    o_ref[...] = ((x * jax.lax.rsqrt(ms + EPS)).astype(scale_ref.dtype) * scale_ref[...]).astype(o_ref.dtype)


def workload(x, scale):
    return rms_norm(x, scale, kernel=_kernel)
