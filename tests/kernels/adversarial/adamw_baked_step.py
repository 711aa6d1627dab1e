"""Exploit: the step count baked in as a constant (605, the reference's default key's draw) while the step
input is taken and ignored. Right for every seed whose step is 605, wrong for the rest."""

import jax.numpy as jnp
from _adamw_rows import adamw

BAKED_STEP = 605


def workload(param, grad, m, v, step):
    return adamw(param, grad, m, v, step, step_of=lambda _ref: jnp.int32(BAKED_STEP))
