"""A correct y = x + 1 in plain JAX (validate with allow_plain_jax): its verdict must name its sandbox."""


def workload(x):
    return x + 1.0
