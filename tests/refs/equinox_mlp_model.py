"""A user's two-layer gated MLP written with Equinox: no named scopes, so regions come from patterns."""

import equinox as eqx
import jax
import jax.numpy as jnp

SIZES = {
    "full": {"tokens": 8192, "dim": 4096, "hidden": 14336, "layers": 2},
    "small": {"tokens": 256, "dim": 256, "hidden": 512, "layers": 2},
}
CONFIG = {"name": "equinox_mlp", "dtype": "bfloat16", "atol": 2e-2, "rtol": 2e-2}


class GatedMlp(eqx.Module):
    gate: eqx.nn.Linear
    up: eqx.nn.Linear
    down: eqx.nn.Linear
    scale: jax.Array

    def __init__(self, dim, hidden, key):
        k1, k2, k3 = jax.random.split(key, 3)
        bf = jnp.bfloat16
        self.gate = eqx.nn.Linear(dim, hidden, use_bias=False, key=k1, dtype=bf)
        self.up = eqx.nn.Linear(dim, hidden, use_bias=False, key=k2, dtype=bf)
        self.down = eqx.nn.Linear(hidden, dim, use_bias=False, key=k3, dtype=bf)
        self.scale = jnp.ones((dim,), bf)

    def __call__(self, x):
        xf = x.astype(jnp.float32)
        n = (xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + 1e-6)).astype(x.dtype) * self.scale
        return x + jax.vmap(self.down)(jax.nn.silu(jax.vmap(self.gate)(n)) * jax.vmap(self.up)(n))


class Stack(eqx.Module):
    layers: list

    def __init__(self, dim, hidden, layers, key):
        self.layers = [GatedMlp(dim, hidden, k) for k in jax.random.split(key, layers)]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    key = jax.random.key(0) if key is None else key
    kx, km = jax.random.split(key)
    x = jax.random.normal(kx, (d["tokens"], d["dim"]), jnp.bfloat16)
    params, _ = eqx.partition(Stack(d["dim"], d["hidden"], d["layers"], km), eqx.is_array)
    return x, params


def workload(x, params):
    first = params.layers[0].gate.weight
    dims = (x.shape[-1], first.shape[0], len(params.layers))
    skeleton = eqx.filter_eval_shape(
        lambda: Stack(*dims, jax.random.key(0))
    )  # structure only, nothing traced
    return eqx.combine(params, eqx.partition(skeleton, eqx.is_array)[1])(x)
