"""The judge answers for the chip: the reference as the target computes it, the upcast oracle, and the
field's error rule (tests/kernels/numerics/: honest kernels that pass and adversaries that fail)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest_paths import KERNELS

from maxkernel.tpu_tools.judge.error_rule import FACTOR, allowances, judge_leaf, reference_error
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.problem.numerics import as_computed, differs_on_target, oracle_dtype
from maxkernel.tpu_tools.reports import Tolerance

NUM = KERNELS / "numerics"


def k(name: str) -> str:
    return str(NUM / f"{name}.py")


def _xw(m=64, kk=512, n=128):
    x = jax.random.normal(jax.random.key(0), (m, kk), jnp.float32)
    w = jax.random.normal(jax.random.key(1), (kk, n), jnp.float32) / kk**0.5
    return x, w


def _err(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


# ---- the reference as a TPU computes it ---------------------------------------------------------------


def test_an_f32_dot_at_default_is_one_bf16_pass_on_a_tpu_target():
    x, w = _xw()
    run, how = as_computed(lambda x, w: x @ w, (x, w), "tpu")
    one_pass = jnp.dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
    assert _err(run(x, w)[0], one_pass) < 1e-5
    assert _err(run(x, w)[0], x @ w) > 1e-3  # the host computes it in f32
    assert "1 bf16 pass" in how and "DEFAULT" in how


def test_declared_precisions_and_algorithms_are_honoured():
    x, w = _xw()
    exact = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    errs = {}
    for name, prec in [
        ("default", None),
        ("high", jax.lax.Precision.HIGH),
        ("highest", jax.lax.Precision.HIGHEST),
        ("bf16_x3", jax.lax.DotAlgorithmPreset.BF16_BF16_F32_X3),
    ]:
        run, _ = as_computed(lambda x, w, p=prec: jnp.dot(x, w, precision=p), (x, w), "tpu")
        errs[name] = _err(run(x, w)[0], exact)
    assert errs["default"] > 30 * errs["high"]  # one pass vs three
    assert abs(errs["high"] - errs["bf16_x3"]) <= 0.5 * errs["high"] + 1e-7
    assert errs["highest"] < 1e-5
    with jax.default_matmul_precision("highest"):  # the config is baked into the jaxpr when traced
        assert differs_on_target(lambda x, w: x @ w, (x, w)) == []
    assert differs_on_target(lambda x, w: x @ w, (x, w))
    xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    assert differs_on_target(lambda x, w: x @ w, (xb, wb)) == []  # bf16 operands: native on the MXU


def test_the_oracle_widens_every_float_and_reaches_into_control_flow():
    x, w = _xw()

    def f(x, w):
        h = (x @ w).astype(jnp.bfloat16)  # an explicit rounding the oracle keeps wide
        carry, ys = jax.lax.scan(lambda c, r: (c + r, c * 2), jnp.zeros(h.shape[1], h.dtype), h)
        return carry, jnp.argmax(ys, -1), jnp.cumsum(h, 0)

    run, how = as_computed(f, (x, w), "oracle")
    carry, arg, cum = run(x, w)
    assert carry.dtype == np.float64 and cum.dtype == np.float64 and arg.dtype == np.int32
    exact = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    assert _err(cum, np.cumsum(exact, 0)) < 1e-9
    assert "float64" in how
    closed = jax.make_jaxpr(lambda a: a * 2)(jnp.ones(4, jnp.bfloat16))
    assert oracle_dtype(closed) == np.float32  # a bf16 program widens to f32


def test_the_oracle_widens_a_window_sum_and_keeps_other_reducers_as_written():
    """An average pool's sum (reduce_window with an add reducer, 49k) is summed wide like any reduction:
    run as written it would round every partial sum to bf16, and a kernel summing in f32 would look worse
    than the reference. A reducer with more to it than one op still runs as written."""
    y = (jax.random.normal(jax.random.key(1), (8, 256), jnp.float32) * 40).astype(jnp.bfloat16)

    def pool(v):
        return jax.lax.reduce_window(v, jnp.zeros((), v.dtype), jax.lax.add, (1, 16), (1, 16), "VALID")

    run, _ = as_computed(pool, (y,), "oracle")
    (got,) = run(y)
    exact = np.asarray(y, np.float64).reshape(8, 16, 16).sum(-1)
    assert got.dtype == np.float32 and _err(got, exact) < 1e-4
    assert _err(pool(y).astype(jnp.float32), exact) > 0.1  # the bf16 sums the oracle no longer gives

    def odd(v):  # max(a, b) + 0: not one op, so as written (bf16)
        return jax.lax.reduce_window(
            v, jnp.zeros((), v.dtype), lambda a, b: jnp.maximum(a, b) + 0, (1, 16), (1, 16), "VALID"
        )

    run, _ = as_computed(odd, (y,), "oracle")
    np.testing.assert_array_equal(np.asarray(run(y)[0]), np.asarray(odd(y), np.float32))  # the bf16 sums


# ---- the rule -----------------------------------------------------------------------------------------


def _leaf(oracle, reference, actual, dtype="float32", tol=Tolerance(atol=0.0, rtol=0.0, source="test")):
    from maxkernel.tpu_tools.judge.compare import within

    return judge_leaf(
        0,
        reference,
        actual,
        tol,
        within(reference, actual, tol),
        oracle,
        reference_error(oracle, reference),
        dtype,
    )


def test_the_rule_takes_max_mean_and_bias_and_says_which_failed():
    rng = np.random.default_rng(0)
    oracle = rng.normal(size=(256, 256))
    reference = oracle + rng.normal(size=oracle.shape) * 1e-3  # a same-precision implementation's noise
    honest = oracle + rng.normal(size=oracle.shape) * 1.5e-3
    e = _leaf(oracle, reference, honest)
    assert e.ok and e.rule == "error_ratio" and 1.0 < e.ratio_mean < FACTOR
    flat = oracle + np.where(rng.random(oracle.shape) < 0.5, 1, -1) * 1.9 * np.abs(reference - oracle).max()
    e = _leaf(oracle, reference, flat)  # under 2x the max everywhere, far over it on average
    assert not e.ok and e.ratio_max < FACTOR and e.ratio_mean > FACTOR
    assert e.finding.startswith("less accurate than the reference")
    shifted = oracle + 0.5e-3  # inside the noise, but one-signed
    e = _leaf(oracle, reference, shifted)
    assert not e.ok and e.ratio_max < FACTOR and e.ratio_mean < FACTOR and e.finding.startswith("biased")
    spike = reference.copy()
    spike[3, 4] += 0.05  # one element off: as accurate on average
    e = _leaf(oracle, reference, spike)
    assert (
        not e.ok and e.worst_index == [3, 4] and "different from the reference at a few elements" in e.finding
    )


def test_integers_stay_exact():
    ref = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert _leaf(ref, ref, ref.copy(), "int32").ok
    off = ref.copy()
    off[1, 1] += 1
    e = _leaf(ref, ref, off, "int32")
    assert not e.ok and e.rule == "exact"


# ---- end to end: validate with default flags (check size small here, for time) ---------------------


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=2) as pool:
        yield Evaluator(pool, timeout_s=300)


def _validate(ev, kernel, reference, target="tpu-v6e", seeds=2):
    return ev.validate(k(kernel), k(reference), target, seeds=seeds, check_sizes=["small"])


def test_a_bf16_kernel_more_accurate_than_its_reference_passes(evaluator):
    r = _validate(evaluator, "residual_mlp_kernel", "residual_mlp_reference", seeds=3)
    assert r.ok, r.failure
    errs = [e for s in r.per_seed for e in s.errors]
    # On the reference's own draw the kernel is the more accurate at its worst element and on the mean. On
    # the rescaled regimes (input_regimes.py) only the mean says so: a few heavy-tailed elements x8 decide
    # the max, where either side can round worse (seen: 1.74x the reference's max, 0.64x its mean).
    own = [e for s in r.per_seed if s.inputs == "reference" for e in s.errors]
    assert own and all(e.rule == "error_ratio" and e.ratio_max < 1.0 and e.ratio_mean < 1.0 for e in own), own
    # a heavy-tailed seed can land inside the elementwise tolerance first (the kernel's error is then 1.00x)
    ruled = [e for e in errs if e.rule == "error_ratio"]
    assert all(e.ratio_mean < 1.0 for e in ruled), errs
    assert all(e.rule in ("error_ratio", "elementwise") for e in errs)
    assert r.numerics.oracle and "float32" in r.numerics.oracle
    assert "of the error allowed" in r.error_summary and "failed" not in r.error_summary, r.error_summary


def test_an_f32_dot_computed_as_xla_does_on_the_tpu_passes_there_and_not_on_the_cpu(evaluator):
    r = _validate(evaluator, "f32_onepass_kernel", "f32_projection_reference")
    assert r.ok, r.failure
    assert r.numerics.differs_from_host and r.numerics.host_max_err[0] < r.numerics.reference_max_err[0]
    r = _validate(evaluator, "f32_onepass_kernel", "f32_projection_reference", target="cpu")
    assert r.failure.kind == "output_mismatch"
    assert "less accurate than the reference" in r.failure.summary


@pytest.mark.parametrize(
    ("kernel", "reference", "says"),
    [
        ("int8_projection_kernel", "f32_projection_reference", "less accurate"),
        ("noise_under_max_kernel", "f32_projection_reference", "less accurate"),
        ("scaled_bias_kernel", "relu_projection_reference", "biased"),
        ("f32_onepass_kernel", "f32_projection_highest_reference", "less accurate"),
    ],
)
def test_low_precision_cheats_and_rule_gamers_fail(evaluator, kernel, reference, says):
    r = _validate(evaluator, kernel, reference, seeds=1)
    assert r.failure is not None and r.failure.kind == "output_mismatch", r.failure
    assert says in r.failure.summary


@pytest.mark.parametrize(
    ("kernel", "reference", "says"),
    [
        # per-tensor int8 gate: mean ~2.7-3.0x the reference's, under 2x + half an ulp (~3.35x for bf16)
        ("int8_gate_mlp_kernel", "residual_mlp_reference", "less accurate"),
        # a bf16 accumulator over 10 k-steps: worst element ~2.3-2.6x, under 2x + half an ulp (~3.2x)
        ("bf16_long_k_accumulator_kernel", "bf16_long_k_reference", "different from the reference at a few"),
    ],
)
def test_the_floor_is_not_added_to_twice_the_references_error(evaluator, kernel, reference, says):
    """bf16 outputs whose error is over 2x the reference's but under 2x plus the half-ulp floor: the floor
    used to be added (a pass summarised as '2.14x (max) / 2.63x (mean) the reference's own, 2x allowed');
    it now decides only where it is the larger (issue 43)."""
    r = _validate(evaluator, kernel, reference, seeds=1)
    assert r.failure is not None and r.failure.kind == "output_mismatch", r.failure
    assert says in r.failure.summary
    (e,) = [e for s in r.per_seed for e in s.errors]
    assert e.rule == "error_ratio" and not e.ok
    added = (
        e.kernel_max_err <= FACTOR * e.reference_max_err + e.floor_max
        and e.kernel_mean_err <= FACTOR * e.reference_mean_err + e.floor_mean
    )
    assert added, "no longer an adversary of the added floor: it fails 2x + floor too"
    a_max, a_mean, _ = allowances(e)
    assert e.kernel_max_err > a_max.value or e.kernel_mean_err > a_mean.value
    assert "failed on 1" in r.error_summary, r.error_summary


# the check sizes each verdict is decided at: "small" alone for time, or the judge's default (small, then
# the derived size) where small alone cannot decide it
SMALL, DEFAULT = ["small"], None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kernel", "reference", "ok", "sizes"),
    [
        # a bf16 accumulator over small's 4 k-steps: mean error 1.6x the reference's, worst element 1.9-3.1x
        # (measured over 16 seed offsets: 1 under 2x, a pass by the field's rule); over the derived size's 8
        # k-steps 3.3-3.7x on the reference's own draw: the default sizes decide it, as they do for a user
        ("bf16_accumulator_kernel", "f32_projection_reference", False, DEFAULT),
        ("right_where_exact_kernel", "relu_projection_reference", False, SMALL),
        ("relu_onepass_kernel", "relu_projection_reference", True, SMALL),
        ("taylor_softmax_kernel", "softmax_reference", False, SMALL),
        ("softmax_kernel", "softmax_reference", True, SMALL),
        ("reads_the_oracle_kernel", "f32_projection_reference", False, SMALL),
        ("attention_bf16_pass_kernel", "attention_highest_reference", False, SMALL),
        ("attention_bf16_pass_kernel", "attention_reference", True, SMALL),
        ("attention_f32_kernel", "attention_highest_reference", True, SMALL),
        ("f32_full_kernel", "f32_projection_reference", True, SMALL),
        ("bf16_long_k_kernel", "bf16_long_k_reference", True, SMALL),
    ],
)
def test_every_numerics_fixture_gets_its_verdict(evaluator, kernel, reference, ok, sizes):
    r = evaluator.validate(k(kernel), k(reference), "tpu-v6e", seeds=2, check_sizes=sizes)
    assert r.ok is ok, r.failure
    if not ok:
        # the oracle-reader globs /tmp: from a checkout under /tmp (a `mktemp -d` clone) its walk reaches the
        # task references too, and the sandbox names that first; either way it never sees an oracle array
        kinds = (
            ("output_mismatch", "reached_reference")
            if kernel == "reads_the_oracle_kernel"
            else ("output_mismatch",)
        )
        # right at small and wrong at the derived size is `shape_specialized`, its cause kept
        f = r.failure
        assert f.kind in kinds or (f.kind == "shape_specialized" and f.cause_kind in kinds), f


def test_remat_custom_rules_and_control_flow_are_re_entered():
    x, w = _xw(8, 16, 16)

    @jax.custom_vjp
    def f(a):
        return jnp.sin(a) * 2

    f.defvjp(lambda a: (f(a), a), lambda r, g: (g * jnp.cos(r),))

    def g(x, w):
        y = jax.checkpoint(lambda a: jax.nn.relu(a @ w))(x)
        z = jax.lax.cond(x.sum() > 0, lambda a: a * 2, lambda a: a - 1, y)
        return jax.lax.fori_loop(0, 3, lambda i, c: c + f(c) * 0.1, z)

    tpu, _ = as_computed(g, (x, w), "tpu")
    oracle, _ = as_computed(g, (x, w), "oracle")
    host = g(x, w)
    assert _err(tpu(x, w)[0], host) > 1e-3  # the dot inside the remat ran as the TPU runs it
    assert _err(oracle(x, w)[0], host) < 1e-4 and oracle(x, w)[0].dtype == np.float64


@pytest.mark.slow  # recurrentgemma (the models stamp); ~10 s
def test_a_library_models_reference_runs_at_the_targets_numerics_on_the_host():
    """Griffin's step, as a TPU computes it, runs on the host: its one-pass dots were bf16 x bf16 -> f32
    dots, which XLA CPU's dot runtime refused ('Unsupported element type for DotThunk'); the halves are
    now held in f32 (exact) and the result equals a bf16 rounding of the operands."""
    pytest.importorskip("recurrentgemma")
    from conftest_paths import REFS

    from maxkernel.tpu_tools.problem.reference import load_reference

    ref = load_reference(str(REFS / "griffin_model.py"))
    args = tuple(ref.create_inputs("small", 0))
    run, how = as_computed(ref.workload, args, "tpu")
    assert "1 bf16 pass" in how, how
    tpu = [
        np.asarray(x, np.float64) for x in jax.tree_util.tree_leaves(run(*jax.tree_util.tree_leaves(args)))
    ]
    host = [np.asarray(x, np.float64) for x in jax.tree_util.tree_leaves(jax.jit(ref.workload)(*args))]
    assert all(np.isfinite(t).all() for t in tpu)
    assert any(np.abs(t - h).max() > 0 for t, h in zip(tpu, host, strict=True)), "no dot changed"


@pytest.mark.slow  # two validations, three seeds each, eight interpret-mode pallas_calls per run; ~25-36 s
def test_int8_in_the_last_layers_of_a_deep_chain_fails_and_its_honest_twin_passes(evaluator):
    """Issue 43's held-out cheat: a chain of eight bf16 residual layers whose last two run in per-tensor
    int8. The reference's own error grows over the six layers before them; the int8 noise still puts the
    output's mean error at ~2.2-2.5x the reference's on its own draw (max ~1.7-2.5x), and far more under
    the outlier channels and heavy tails of the other seeds' regimes."""
    from conftest_paths import REFS

    reference = str(REFS / "deep_chain_reference.py")
    r = evaluator.validate(k("deep_chain_int8_tail_kernel"), reference, "tpu-v6e", check_sizes=["small"])
    assert r.failure is not None and r.failure.kind == "output_mismatch", r.failure
    assert "less accurate" in r.failure.summary
    r = evaluator.validate(k("deep_chain_honest_kernel"), reference, "tpu-v6e", check_sizes=["small"])
    assert r.ok, r.failure
