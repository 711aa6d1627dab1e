"""Input regimes: each validation seed's inputs drawn like a model's activations, not only N(0,1).

A reference's `create_inputs` almost always draws unit-variance Gaussians, so a kernel right only there
(an rsqrt by Newton steps from 1.0, int8 with one scale for the whole tensor) passes on them. Validation
gives each seed a regime by its place in the seed list; position 0 keeps the reference's own draw, and the
others multiply the reference's FLOAT inputs by positive factors:

- `channel_scales`: every channel (the last axis) times a log-normal scale, a few outlier channels (1 in
  CHANNELS_PER_OUTLIER, at least one) times OUTLIER_LO..OUTLIER_HI more, as activations before a
  projection have them (LLM.int8's outlier features); an input of two or more axes also has every
  sample its own log-normal scale (SAMPLE_SIGMA), one per index of its leading axes but the last, at
  most two ([tokens, D]: per token; [B, S, D]: per token; NCHW: per image and channel; a weight: per
  output row), as tokens' norms and images' channels differ in a real batch. Without it a reduction
  over a large volume of i.i.d. values gives nearly the same number for every sample, so a kernel that
  computes one sample and broadcasts it would pass (the weak-check guard refuses such a check);
- `heavy_tails`: every element times a heavy-tailed factor (Pareto with tail index HEAVY_ALPHA, >= 1,
  capped at MAX_FACTOR: on a Gaussian, tails like a Student-t's with 3 dof), the whole input times a
  global scale 2**u with |u| drawn in [SCALE_EXP_LO, SCALE_EXP_HI], up or down.

Positive factors keep every sign and zero (a log or sqrt of positive inputs stays defined, a -inf or 0
mask stays one). Integer and bool inputs, and inputs of one element (hyperparameters: eps, a
temperature), are untouched; a value that would overflow its dtype is clipped to the largest finite one.
The factors come from numpy's generator seeded with (salt, regime, seed, input position): never the
reference's stream nor input cases', the same on every host, so the recorded seeds (`--seed-offset`)
reproduce them. They are drawn on the host: no compile (XLA's gamma sampler alone costs seconds).
"""

from __future__ import annotations

from typing import Literal

Regime = Literal["reference", "channel_scales", "heavy_tails"]
REGIMES: tuple[Regime, ...] = ("reference", "channel_scales", "heavy_tails")
_SALT = 0x12E6

CHANNEL_SIGMA = 0.75  # log-normal per-channel scales: E[scale**2] = exp(2 sigma**2) ~ 3.1
CHANNELS_PER_OUTLIER = 256
OUTLIER_LO, OUTLIER_HI = 8.0, 20.0  # LLM.int8: outlier features up to ~20x the others' magnitude
SAMPLE_SIGMA = 1.0  # per-sample log-normal scales: ~95% within x0.14..x7.4 of each other
SAMPLE_AXES = 2  # the leading axes (but the last) a sample scale is drawn over, at most
HEAVY_ALPHA = 3.0  # P(factor > t) = t**-3
MAX_FACTOR = 16.0
SCALE_EXP_LO, SCALE_EXP_HI = 2.0, 3.0  # the global scale: x4..x8, or /4../8

DESCRIPTIONS: dict[Regime, str] = {
    "reference": "the reference's own draw",
    "channel_scales": (
        f"float inputs x per-channel (last axis) log-normal scales (sigma {CHANNEL_SIGMA:g}), 1 channel in "
        f"{CHANNELS_PER_OUTLIER} an outlier (x{OUTLIER_LO:g}..{OUTLIER_HI:g} more), and per-sample (leading "
        f"axes but the last, up to {SAMPLE_AXES}) log-normal scales (sigma {SAMPLE_SIGMA:g})"
    ),
    "heavy_tails": (
        f"float inputs x heavy-tailed per-element factors (Pareto, tail index {HEAVY_ALPHA:g}, capped at "
        f"{MAX_FACTOR:g}) and a global scale 2**u, |u| in [{SCALE_EXP_LO:g}, {SCALE_EXP_HI:g}], up or down"
    ),
}


def regime_at(position: int) -> Regime:
    """The regime of the seed at `position` in a validation's seed list (cycling past the last)."""
    return REGIMES[position % len(REGIMES)]


def describe(regime: Regime) -> str:
    return DESCRIPTIONS[regime]


def _factors(shape: tuple, rng, regime: Regime):
    """Positive float32 factors broadcasting against an input of `shape`."""
    import numpy as np

    if regime == "channel_scales":
        n = shape[-1]
        factor = np.exp(CHANNEL_SIGMA * rng.standard_normal(n)).astype(np.float32)
        where = rng.choice(n, max(1, n // CHANNELS_PER_OUTLIER), replace=False)
        factor[where] *= np.exp(rng.uniform(np.log(OUTLIER_LO), np.log(OUTLIER_HI), where.size)).astype(
            np.float32
        )
        lead = min(len(shape) - 1, SAMPLE_AXES)
        if lead < 1:
            return factor
        # drawn after the channel factors, so a 1-D input's factors are what they were before samples had any
        sample = np.exp(SAMPLE_SIGMA * rng.standard_normal(shape[:lead])).astype(np.float32)
        return sample.reshape(shape[:lead] + (1,) * (len(shape) - lead)) * factor
    u = rng.random(shape, dtype=np.float32)
    factor = np.minimum((1.0 - u) ** np.float32(-1.0 / HEAVY_ALPHA), np.float32(MAX_FACTOR))
    exponent = rng.uniform(SCALE_EXP_LO, SCALE_EXP_HI) * (1.0 if rng.random() < 0.5 else -1.0)
    return factor * np.float32(2.0**exponent)


def _scaled(x, rng, regime: Regime):
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np

    dtype = np.dtype(x.dtype)
    big = float(ml_dtypes.finfo(dtype).max)
    xf = np.asarray(x, np.float32)
    with np.errstate(over="ignore"):
        y = xf * _factors(tuple(x.shape), rng, regime)
    y = np.where(np.isfinite(xf), np.clip(y, -big, big), y)  # overflow clipped; an inf input stays one
    return jnp.asarray(y.astype(dtype))


def apply_regime(inputs, regime: Regime, seed: int):
    """The inputs under `regime` (the same pytree; float leaves of more than one element rescaled)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if regime == "reference":
        return inputs
    leaves, tree = jax.tree_util.tree_flatten(inputs)
    out = []
    for i, x in enumerate(leaves):
        if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating) and np.size(x) > 1:
            rng = np.random.default_rng([_SALT, REGIMES.index(regime), seed, i])
            out.append(_scaled(x, rng, regime))
        else:
            out.append(x)
    return jax.tree_util.tree_unflatten(tree, out)
