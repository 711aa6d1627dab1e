"""13p Cross_Entropy: Llama-3-8B LM-head matmul + softmax cross-entropy, mean over tokens (sheet §5, 13p).

"Fused" only names the optimisation target: the reference materialises the [B, V] logits. The log-softmax
is in the dtype; the per-token loss and the mean are float32.

A package because a Pallas reference kernel lives beside it (``pallas_reference.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"batch_tokens": 8192, "hidden_dim": 4096, "vocab_size": 128256},
    "small": {"batch_tokens": 256, "hidden_dim": 256, "vocab_size": 4096},
}

CONFIG = {
    "name": "llama3_8b_cross_entropy",
    "model": "Llama-3.1-8B",
    "operator": "fused_cross_entropy",
    **SIZES["full"],
    "dtype": "bfloat16",
    "output_dtype": "float32",
    "atol": 1e-2,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """hidden [B, H] ~ N(0,1); weight [H, V] ~ N(0,1)·0.02; labels [B] int32 uniform in [0, V)."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    k1, k2, k3 = split(make_key(key, SEED), 3)
    hidden = normal(k1, (d["batch_tokens"], d["hidden_dim"]), dtype)
    weight = normal(k2, (d["hidden_dim"], d["vocab_size"]), dtype, 0.02)
    labels = jax.random.randint(k3, (d["batch_tokens"],), 0, d["vocab_size"], dtype=jnp.int32)
    return hidden, weight, labels


def workload(hidden: jax.Array, weight: jax.Array, labels: jax.Array) -> jax.Array:
    """mean_b −log_softmax(hidden @ weight)[b, label_b]; float32 scalar.

    Picking the label's entry equals the original's −Σ onehot_f32 · f32(lp) exactly (one nonzero term).
    """
    lp = jax.nn.log_softmax(hidden @ weight, axis=-1)  # in the dtype
    picked = jnp.take_along_axis(lp, labels[:, None], axis=-1)[:, 0].astype(jnp.float32)
    return jnp.mean(-picked)


def get_flops(size: str = "full") -> int:
    """2·B·H·V for the matmul plus 3·B·V for the softmax."""
    d = SIZES[size]
    b, h, v = d["batch_tokens"], d["hidden_dim"], d["vocab_size"]
    return 2 * b * h * v + 3 * b * v
