"""Griffin from Google DeepMind's `recurrentgemma` library (1.0.1, `recurrentgemma.jax`), unmodified.

A tiny config with Griffin's structure: two residual blocks with the RG-LRU recurrence (a Conv1D, the
gates, and the linear recurrence as the library's `lax.scan` over time) for each local-attention block,
MLP blocks with GeLU gating, and `nn.remat` around every block (the library's gradient checkpointing).
The scan is the library's LINEAR_NATIVE one (what it picks off a TPU; on a TPU it would pick its Pallas
kernel instead, which is what a region kernel for the RG-LRU competes with). Random small parameters
(no weights are downloaded); tokens at positions 0..L-1.
Install: see the Makefile's models stamp (`recurrentgemma==1.0.1` without its dependencies).
"""

import jax
import jax.numpy as jnp
from recurrentgemma import common
from recurrentgemma import jax as griffin_lib

from maxkernel.jaxbench.model_params import draw_like_init

SIZES = {
    "full": {"batch": 2, "seq": 256, "vocab": 8192, "width": 1024, "mlp": 3072},
    "small": {"batch": 1, "seq": 64, "vocab": 512, "width": 128, "mlp": 384},
}
CONFIG = {"name": "griffin", "dtype": "float32", "atol": 1e-4, "rtol": 1e-4}
BLOCKS = (
    common.TemporalBlockType.RECURRENT,
    common.TemporalBlockType.RECURRENT,
    common.TemporalBlockType.ATTENTION,
)
HEADS = 4


def config(d):
    return common.GriffinConfig(
        vocab_size=d["vocab"],
        width=d["width"],
        mlp_expanded_width=d["mlp"],
        num_heads=HEADS,
        block_types=BLOCKS,
        embeddings_scale_by_sqrt_dim=True,
        attention_window_size=d["seq"] // 4,
        logits_soft_cap=30.0,
        scan_type=common.ScanType.LINEAR_NATIVE,
    )


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    key = jax.random.key(0) if key is None else key
    kt, kp = jax.random.split(key)
    tokens = jax.random.randint(kt, (d["batch"], d["seq"]), 1, d["vocab"], jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(d["seq"], dtype=jnp.int32), tokens.shape)
    shapes = jax.eval_shape(
        lambda k: griffin_lib.Griffin(config(d)).init(k, tokens, positions, None, True, False), kp
    )
    params = draw_like_init(kp, shapes)  # never one constant: see its docstring
    return tokens, positions, params


def workload(tokens, positions, params):
    p = params["params"]
    vocab, width = p["embedder"]["input_embedding"].shape
    mlp = p["blocks.0"]["mlp_block"]["ffw_up"]["w"].shape[-1]
    d = {"seq": tokens.shape[1], "vocab": vocab, "width": width, "mlp": mlp}
    logits, _ = griffin_lib.Griffin(config(d)).apply(params, tokens, positions, None, True, False)
    return logits
