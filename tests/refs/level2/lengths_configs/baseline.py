"""A level-2-style file of our own in the CONFIGS form: named configs, CONFIG the default, create_inputs(dtype,
config=None), an integer structure input (per-row lengths) and a workload that reads CONFIG."""

import jax
import jax.numpy as jnp

CONFIGS = {
    "decode": {"batch": 64, "width": 512, "scale": 3},
    "prefill": {"batch": 16, "width": 2048, "scale": 3},
}
CONFIG = CONFIGS["decode"]


def create_inputs(dtype=jnp.bfloat16, config=None):
    cfg = CONFIGS[config] if isinstance(config, str) else (config or CONFIG)
    k1, k2 = jax.random.split(jax.random.key(42))
    x = jax.random.normal(k1, (cfg["batch"], cfg["width"]), dtype=dtype)
    lengths = jax.random.randint(k2, (cfg["batch"],), 1, cfg["width"] + 1, dtype=jnp.int32)
    return x, lengths


def workload(x, lengths):
    # masked row sums, scaled by a CONFIG value: the workload reads CONFIG, as two upstream files do
    cols = jnp.arange(x.shape[1])[None, :]
    kept = jnp.where(cols < lengths[:, None], x.astype(jnp.float32), 0.0)
    return kept.sum(axis=1) * CONFIG["scale"] + CONFIG["width"]
