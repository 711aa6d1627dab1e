"""9p SwiGLU_MLP: the Llama-3.1-70B feed-forward block, silu(x Wg) ⊙ (x Wu) Wd (sheet §5, 9p).

A package because a Pallas reference kernel lives beside it (``pallas_reference.py``).
"""

from __future__ import annotations

import jax

from maxkernel.jaxbench.common import make_key, normal, resolve_dtype, split

SIZES = {
    "full": {"batch": 2, "seq_len": 4096, "emb_dim": 8192, "mlp_dim": 28672},
    # mlp_dim / emb_dim = 3.5 as in the full shape.
    "small": {"batch": 1, "seq_len": 128, "emb_dim": 256, "mlp_dim": 896},
}

CONFIG = {
    "name": "llama3_70b_swiglu",
    "model": "Llama-3.1-70B",
    "operator": "swiglu_mlp",
    **SIZES["full"],
    "dtype": "bfloat16",
    "atol": 1e-2,
    "rtol": 1e-2,
}

SEED = 42


def create_inputs(dtype=None, *, key=None, size: str = "full") -> tuple[jax.Array, ...]:
    """x [B, S, E] ~ N(0,1); gate, up [E, M] and down [M, E] ~ N(0,1)·0.02."""
    d = SIZES[size]
    dtype = resolve_dtype(dtype, CONFIG["dtype"])
    k1, k2, k3, k4 = split(make_key(key, SEED), 4)
    e, m = d["emb_dim"], d["mlp_dim"]
    x = normal(k1, (d["batch"], d["seq_len"], e), dtype)
    return (
        x,
        normal(k2, (e, m), dtype, 0.02),
        normal(k3, (e, m), dtype, 0.02),
        normal(k4, (m, e), dtype, 0.02),
    )


def workload(x, gate_kernel, up_kernel, down_kernel) -> jax.Array:
    """Each matmul returns the input dtype; silu and the product are elementwise in that dtype."""
    g = x @ gate_kernel
    h = jax.nn.silu(g) * (x @ up_kernel)
    return h @ down_kernel


def get_flops(size: str = "full") -> int:
    """2·B·S·E·M for each of the three matmuls."""
    d = SIZES[size]
    return 6 * d["batch"] * d["seq_len"] * d["emb_dim"] * d["mlp_dim"]
