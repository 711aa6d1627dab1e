"""17p Triangle_Multiplication: AlphaFold2 triangle multiplicative update, outgoing edges (sheet §5, 17p).

Gated left/right projections are contracted over the shared residue k (T[i,j] = Σ_k L[i,k] ⊙ R[j,k]),
RMS-normalised over channels (no mean subtraction, eps 1e-6, no input LayerNorm), projected and gated
by the *unmasked* pair activations. Every step is in the dtype. The original name said "768"; N is 1536.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"N": 1536, "C": 128},
    "small": {"N": 128, "C": 128},
}

CONFIG = {
    "name": "alphafold_768_triangle_mult",
    "model": "AlphaFold2",
    "operator": "triangle_mult_outgoing",
    **SIZES["full"],
    "direction": "outgoing",
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """pair_act [N, N, C] ~ N(0,1); mask [N, N, 1] ones; six [C, C] weights ~ N(0,1)·0.02 and
    center_scale [C] = N(0,1)·0.1 + 1. keys[8] is unused, as in the sheet."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    keys = split(make_key(key, SEED), 9)
    n, c = d["N"], d["C"]
    pair_act = normal(keys[0], (n, n, c), dtype)
    mask = jnp.ones((n, n, 1), dtype=dtype)
    left_proj, right_proj, left_gate, right_gate = (normal(keys[i], (c, c), dtype, 0.02) for i in range(1, 5))
    center_scale = normal(keys[5], (c,), dtype, 0.1) + 1.0
    out_proj = normal(keys[6], (c, c), dtype, 0.02)
    out_gate = normal(keys[7], (c, c), dtype, 0.02)
    return pair_act, mask, left_proj, right_proj, left_gate, right_gate, center_scale, out_proj, out_gate


def workload(
    pair_act, mask, left_proj_w, right_proj_w, left_gate_w, right_gate_w, center_scale, out_proj_w, out_gate_w
) -> jax.Array:
    """Outgoing triangle update; output [N, N, C] in the dtype."""
    act = pair_act * mask
    left = (act @ left_proj_w) * jax.nn.sigmoid(act @ left_gate_w)
    right = (act @ right_proj_w) * jax.nn.sigmoid(act @ right_gate_w)
    t = jnp.einsum("ikc,jkc->ijc", left, right)
    rms = jnp.sqrt(jnp.mean(t * t, axis=-1, keepdims=True) + 1e-6)
    tn = (t / rms) * center_scale
    return (tn @ out_proj_w) * jax.nn.sigmoid(pair_act @ out_gate_w)


def get_flops(size: str = "full") -> int:
    """Four gating/projection matmuls (4·N²·C²·2), the contraction (N³·C·2), and the output projection
    and gate (2·N²·C²·2), as in the sheet."""
    d = SIZES[size]
    n, c = d["N"], d["C"]
    return 4 * n * n * c * c * 2 + n**3 * c * 2 + 2 * n * n * c * c * 2
