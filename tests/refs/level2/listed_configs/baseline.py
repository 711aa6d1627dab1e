"""A level-2-style file of our own in the listed form: CONFIG['configs'] maps names to tuples and
create_inputs() returns one input set per entry."""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "listed_l2",
    "configs": {
        "wide": (32, 4096),
        "narrow": (32, 512),
    },
    "atol": 1e-2,
    "rtol": 1e-2,
}


def create_inputs():
    out = []
    configs = CONFIG["configs"]
    keys = jax.random.split(jax.random.key(0), len(configs))
    for (rows, cols), key in zip(configs.values(), keys, strict=True):
        out.append((jax.random.normal(key, (rows, cols), jnp.float32),))
    return out


def workload(x):
    return jax.nn.softmax(x, axis=-1)
