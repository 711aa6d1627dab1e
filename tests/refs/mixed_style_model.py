"""A user's model in mixed styles: a conv stem (NHWC), group norm, jax.nn.dot_product_attention over the
patches, a vmap'd per-head projection, a fori_loop of two residual MLP steps under jax.checkpoint."""

import jax
import jax.numpy as jnp

SIZES = {
    "full": {"batch": 8, "hw": 64, "cin": 64, "c": 256, "heads": 4},
    "small": {"batch": 1, "hw": 16, "cin": 8, "c": 32, "heads": 2},
}
CONFIG = {"name": "mixed_style", "dtype": "bfloat16", "atol": 3e-2, "rtol": 3e-2}


def create_inputs(dtype=None, *, key=None, size="full"):
    z = SIZES[size]
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    ks = jax.random.split(key, 5)
    bf = jnp.bfloat16
    img = jax.random.normal(ks[0], (z["batch"], z["hw"], z["hw"], z["cin"])).astype(bf)
    conv_w = (jax.random.normal(ks[1], (3, 3, z["cin"], z["c"])) * (9 * z["cin"]) ** -0.5).astype(bf)
    qkv = (jax.random.normal(ks[2], (3, z["heads"], z["c"], z["c"] // z["heads"])) * z["c"] ** -0.5).astype(
        bf
    )
    w1 = (jax.random.normal(ks[3], (z["c"], 2 * z["c"])) * z["c"] ** -0.5).astype(bf)
    w2 = (jax.random.normal(ks[4], (2 * z["c"], z["c"])) * (2 * z["c"]) ** -0.5).astype(bf)
    return img, conv_w, qkv, w1, w2


def group_norm(x, groups=8):
    b, h, w, c = x.shape
    g = x.astype(jnp.float32).reshape(b, h, w, groups, c // groups)
    mu = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    return ((g - mu) * jax.lax.rsqrt(var + 1e-5)).reshape(b, h, w, c).astype(x.dtype)


@jax.jit
def stem(img, conv_w):
    y = jax.lax.conv_general_dilated(img, conv_w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.silu(group_norm(y))


def workload(img, conv_w, qkv, w1, w2):
    x = stem(img, conv_w)
    b, h, w, c = x.shape
    t = x.reshape(b, h * w, c)
    proj = jax.vmap(lambda wh: t @ wh, in_axes=0, out_axes=2)  # per head: [b, s, heads, dh]
    q, k, v = (proj(qkv[i]) for i in range(3))
    with jax.named_scope("attention"):
        a = jax.nn.dot_product_attention(q, k, v).reshape(b, h * w, c)
    t = t + a

    @jax.checkpoint
    def mlp(i, t):
        return t + jax.nn.gelu(t @ w1) @ w2

    t = jax.lax.fori_loop(0, 2, mlp, t)
    return t.reshape(b, h, w, c)
