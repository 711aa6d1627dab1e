"""Extra input cases: size overrides, value distributions, and validation on them through the pool."""

import jax.numpy as jnp
import numpy as np
import pytest
from conftest_paths import PLUS_ONE_REF, REFS, kernel

from maxkernel.tpu_tools.errors import UnusableCaseError, UsageError
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.problem.input_cases import InputCase, transform_inputs
from maxkernel.tpu_tools.problem.reference import load_reference


def case(**kw) -> InputCase:
    return InputCase(name=kw.pop("name", "c"), **kw)


def test_size_overrides_merge_over_the_base_size_and_leave_sizes_alone():
    ref = load_reference(PLUS_ONE_REF)
    (x,) = ref.create_inputs("small", 3, case(sizes={"rows": 40}))
    assert x.shape == (40, 128) and x.dtype == jnp.float32
    assert ref.input_shapes("small", case(sizes={"cols": 256}))[0].shape == (16, 256)
    assert ref.create_inputs("small", 3)[0].shape == (16, 128)  # SIZES were lent, then taken back
    (y,) = ref.create_inputs("small", 3, case(sizes={"dtype": "bfloat16"}))
    assert y.dtype == jnp.bfloat16


def test_bad_overrides_and_fixed_input_references_are_unusable_cases():
    ref = load_reference(PLUS_ONE_REF)
    with pytest.raises(UnusableCaseError, match=r"unknown dimension\(s\) \['depth'\]"):
        ref.create_inputs("small", 0, case(sizes={"depth": 2}))
    with pytest.raises(UnusableCaseError, match="positive integer"):
        ref.create_inputs("small", 0, case(sizes={"rows": 0}))
    fixed = load_reference(str(REFS / "jaxbench_style_matmul.py"))
    with pytest.raises(
        UsageError, match="this reference has fixed inputs; size overrides need a maxkernel-format"
    ):
        fixed.create_inputs("full", 0, case(sizes={"m": 8}))
    a = fixed.create_inputs("full", 0, case(distribution="negative"))
    assert all(float(jnp.max(x.astype(jnp.float32))) <= 0 for x in a)


@pytest.mark.parametrize(
    ("distribution", "scale", "check"),
    [
        ("zeros", None, lambda y, x: not np.any(y)),
        ("ones", None, lambda y, x: np.all(y == 1)),
        ("constant", 2.5, lambda y, x: np.all(y == 2.5)),
        ("large_magnitude", None, lambda y, x: np.allclose(y, x * 1e3, rtol=1e-6)),
        ("small_magnitude", 1e-2, lambda y, x: np.allclose(y, x * 1e-2, rtol=1e-6)),
        ("negative", None, lambda y, x: np.all(y <= 0) and np.allclose(-y, np.abs(x))),
        ("uniform", 3.0, lambda y, x: np.all(np.abs(y) <= 3.0) and np.abs(y).max() > 2.0),
        ("sparse", None, lambda y, x: 0.8 < np.mean(y == 0) < 0.97),
        ("integers", 4.0, lambda y, x: np.all(y == np.round(y))),
        ("mixed_sign", None, lambda y, x: np.any(y > 0) and np.any(y < 0)),
    ],
)
def test_distributions_transform_floats_only_deterministically(distribution, scale, check):
    x = jnp.asarray(np.random.default_rng(0).normal(size=(64, 128)), jnp.float32)
    idx = jnp.arange(7, dtype=jnp.int32)
    c = case(distribution=distribution, scale=scale)
    y, same_idx = transform_inputs((x, idx), c, seed=5)
    again, _ = transform_inputs((x, idx), c, seed=5)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert same_idx is idx  # index inputs untouched
    assert np.array_equal(np.asarray(y), np.asarray(again))
    assert check(np.asarray(y), np.asarray(x))


def test_dtype_is_kept_for_bf16():
    x = jnp.ones((8, 128), jnp.bfloat16)
    (y,) = transform_inputs((x,), case(distribution="large_magnitude"), seed=0)
    assert y.dtype == jnp.bfloat16 and float(y[0, 0]) == 1000.0


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=2) as pool:
        yield Evaluator(pool, timeout_s=120)


@pytest.mark.slow  # four interpret-mode validations over input cases (~20 s): make test-slow
def test_validation_on_cases_catches_a_kernel_right_only_for_normal_inputs(evaluator):
    clipped = kernel("clipped_plus_one")
    # the first check is the standard one (small alone: this test is about cases, not sizes)
    assert evaluator.validate(clipped, PLUS_ONE_REF, "cpu", "small", seeds=1, check_sizes=["small"]).ok
    big = evaluator.validate(
        clipped,
        PLUS_ONE_REF,
        "cpu",
        "small",
        seeds=[7],
        case=case(name="big", distribution="large_magnitude"),
    )
    assert not big.ok and big.failure.kind == "output_mismatch"
    assert big.case.name == "big" and big.per_seed[0].seed == 7
    resized = evaluator.validate(
        clipped, PLUS_ONE_REF, "cpu", "small", seeds=1, case=case(sizes={"rows": 24})
    )
    assert resized.ok, resized.failure
    bad = evaluator.validate(clipped, PLUS_ONE_REF, "cpu", "small", seeds=1, case=case(sizes={"depth": 2}))
    assert not bad.ok and bad.failure.kind == "case_unusable"
    assert "unusable, not a verdict on the kernel" in bad.failure.summary and "depth" in bad.failure.summary


def test_the_tester_can_only_ask_for_distributions_the_tools_apply():
    """subagents/ and tpu_tools/ are separate leaf rooms, so the list lives twice; keep them equal."""
    from typing import get_args

    from maxkernel.subagents import outputs
    from maxkernel.tpu_tools.problem import input_cases

    assert get_args(outputs.Distribution) == get_args(input_cases.Distribution)
