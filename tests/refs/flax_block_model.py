"""A user's pre-norm transformer block written with Flax linen: the module paths are the boundaries."""

import flax.linen as nn
import jax
import jax.numpy as jnp

HEAD_DIM = 64
SIZES = {
    "full": {"batch": 4, "seq": 2048, "dim": 2048, "hidden": 8192},
    "small": {"batch": 1, "seq": 128, "dim": 256, "hidden": 512},
}
CONFIG = {"name": "flax_block", "dtype": "bfloat16", "atol": 2e-2, "rtol": 2e-2}


class Attention(nn.Module):
    @nn.compact
    def __call__(self, x):
        b, s, d = x.shape
        heads = d // HEAD_DIM
        qkv = nn.Dense(3 * d, use_bias=False, dtype=jnp.bfloat16, name="qkv")(x)
        q, k, v = (t[:, :, 0] for t in jnp.split(qkv.reshape(b, s, 3, heads, HEAD_DIM), 3, axis=2))
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / HEAD_DIM**0.5
        logits = jnp.where(jnp.tril(jnp.ones((s, s), bool)), logits, -1e30)
        p = jax.nn.softmax(logits, axis=-1).astype(jnp.bfloat16)
        o = jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, s, d)
        return nn.Dense(d, use_bias=False, dtype=jnp.bfloat16, name="out")(o)


class Mlp(nn.Module):
    hidden: int

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(self.hidden, dtype=jnp.bfloat16, name="up")(x)
        return nn.Dense(x.shape[-1], dtype=jnp.bfloat16, name="down")(nn.gelu(h))


class Block(nn.Module):
    hidden: int

    @nn.compact
    def __call__(self, x):
        x = x + Attention(name="attn")(nn.RMSNorm(dtype=jnp.bfloat16, name="norm1")(x))
        return x + Mlp(self.hidden, name="mlp")(nn.RMSNorm(dtype=jnp.bfloat16, name="norm2")(x))


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    key = jax.random.key(0) if key is None else key
    kx, kp = jax.random.split(key)
    x = jax.random.normal(kx, (d["batch"], d["seq"], d["dim"]), jnp.bfloat16)
    params = Block(d["hidden"]).init(kp, x)
    return x, jax.tree.map(lambda p: p.astype(jnp.bfloat16), params)


def workload(x, params):
    return Block(params["params"]["mlp"]["up"]["kernel"].shape[-1]).apply(params, x)
