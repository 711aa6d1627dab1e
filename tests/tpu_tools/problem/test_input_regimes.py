"""Input regimes (problem/input_regimes.py): positive factors on float inputs, drawn from the seed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.tpu_tools.problem.input_regimes import (
    CHANNELS_PER_OUTLIER,
    MAX_FACTOR,
    OUTLIER_LO,
    REGIMES,
    apply_regime,
    regime_at,
)


def inputs():
    kx, ks = jax.random.split(jax.random.key(3))
    x = jax.random.normal(kx, (64, 1024), jnp.bfloat16).at[0, :8].set(0.0)
    scale = jax.random.normal(ks, (1024,), jnp.float32) * 0.1 + 1.0
    return x, scale, jnp.arange(16, dtype=jnp.int32), jnp.float32(1e-5), {"mask": jnp.array([0.0, -jnp.inf])}


def test_the_seed_list_cycles_through_the_regimes_from_the_references_own_draw():
    assert [regime_at(i) for i in range(4)] == ["reference", "channel_scales", "heavy_tails", "reference"]
    assert apply_regime(inputs(), "reference", 5) is not None
    x, *_ = inputs()
    assert apply_regime((x,), "reference", 5)[0] is x


@pytest.mark.parametrize("regime", REGIMES[1:])
def test_factors_are_positive_reproducible_and_only_on_float_arrays(regime):
    before = inputs()
    after = apply_regime(before, regime, 11)
    again = apply_regime(inputs(), regime, 11)
    other = apply_regime(inputs(), regime, 12)
    for b, a, g in zip(
        jax.tree_util.tree_leaves(before),
        jax.tree_util.tree_leaves(after),
        jax.tree_util.tree_leaves(again),
        strict=True,
    ):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(np.asarray(a), np.asarray(g))  # the same seed, the same inputs
        bf, af = np.asarray(b, np.float64), np.asarray(a, np.float64)
        assert np.array_equal(np.sign(af), np.sign(bf))  # signs and zeros (and a -inf mask) kept
    x, scale, ints, eps, tree = after
    assert np.array_equal(ints, before[2]) and float(eps) == float(before[3])  # ints, one-element floats
    assert not np.array_equal(np.asarray(x), np.asarray(other[0]))  # another seed, other factors
    assert np.isfinite(np.asarray(x, np.float32)).all()


def test_channel_scales_have_outlier_channels_and_every_sample_its_own_scale():
    x = jnp.ones((4, 1024), jnp.float32)
    (y,) = apply_regime((x,), "channel_scales", 0)
    f = np.asarray(y)
    per_sample = f[:, :1] / f[0, 0]
    assert np.allclose(f, per_sample * f[0])  # a factor per channel (last axis) times one per row
    assert per_sample.max() / per_sample.min() > 1.5
    (v,) = apply_regime((x[0],), "channel_scales", 0)
    per_channel = np.asarray(v)  # a 1-D input: channel factors alone
    median = float(np.median(per_channel))
    assert (per_channel > OUTLIER_LO * median / 3).sum() >= 1024 // CHANNELS_PER_OUTLIER
    assert 0.5 < median < 2.0 and per_channel.std() > 0.5


def test_heavy_tails_move_the_scale_away_from_one_with_heavy_tails():
    x = jnp.ones((256, 256), jnp.float32)
    scales = []
    for seed in range(8):
        (y,) = apply_regime((x,), "heavy_tails", seed)
        f = np.asarray(y)
        scales.append(float(np.median(f)))
        assert f.max() / np.median(f) > 4.0 and f.max() <= MAX_FACTOR * 8.0 + 1e-3  # a tail, capped
    assert all(s > 4.0 or s < 0.4 for s in scales)  # the global scale is never ~1
    assert any(s > 4.0 for s in scales) and any(s < 0.4 for s in scales)  # up and down


def test_sample_scales_make_each_sample_of_a_reduction_differ():
    """A per-sample mean of a large i.i.d. volume is the same number for every sample to ~1e-3; the per-sample
    scales (one per image and channel of an NCDHW input) move it by far more, so a kernel that computes one
    sample and broadcasts it fails here, where it passes on the reference's own draw."""
    x = jnp.asarray(np.random.default_rng(0).random((8, 3, 8, 16, 16), dtype=np.float32))
    (y,) = apply_regime((x,), "channel_scales", 1)
    own, scaled = np.asarray(x).mean(axis=(1, 2, 3, 4)), np.asarray(y).mean(axis=(1, 2, 3, 4))
    assert own.std() / own.mean() < 0.01
    assert scaled.std() / scaled.mean() > 0.2
    f = np.asarray(y) / np.asarray(x)
    assert np.allclose(f, f[:, :, :1, :1, :1] * f[:1, :1, :1, :1, :] / f[0, 0, 0, 0, 0], rtol=1e-5)
