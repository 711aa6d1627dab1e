"""Validation, judge side: the reference child and the comparison. Candidate code never runs here.

1. `reference_job` (a child that imports only the reference, from bytes read once and hashed) resolves
   the size, builds each seed's inputs and writes them into the candidate's scratch dir, computes the
   expected outputs into a separate dir, and counts the reference's work (its jaxpr census).
2. The parent loads the expected outputs into memory and deletes their dir before the candidate starts.
3. `candidate_run.candidate_job` (judged side) runs the candidate on the handed-over inputs, every set
   more than once in a shuffled, interleaved order, and writes every run's outputs.
4. `judge_runs` (parent) compares every run against the expected outputs; a kernel right only on its
   first calls, or only on some sets, fails. NaN where the reference has a number always fails.

A reference that breaks on its own is `reference_error`; an extra case it cannot build or run is
`case_unusable`: neither is a verdict on the kernel.
"""

from __future__ import annotations

import random
import secrets
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from maxkernel.tpu_tools.errors import ReferenceFailure, UsageError
from maxkernel.tpu_tools.judge.compare import compare_outputs, trivial_outputs_passing, within
from maxkernel.tpu_tools.judge.error_rule import FACTOR, reference_error
from maxkernel.tpu_tools.pool.handover import save_arrays, save_specs, specs_of
from maxkernel.tpu_tools.problem import chip_program, memory
from maxkernel.tpu_tools.problem.input_cases import InputCase
from maxkernel.tpu_tools.problem.input_regimes import Regime, apply_regime, regime_at
from maxkernel.tpu_tools.problem.reference import Reference, load_reference, reference_failure
from maxkernel.tpu_tools.problem.tolerances import choose_tolerance
from maxkernel.tpu_tools.problem.work_check import census_of
from maxkernel.tpu_tools.reports import Failure, ReferenceSide, SeedResult, Tolerance

# Near-constant outputs (constant_guard): the tightened tolerance is TIGHTEN_SIGMAS x the std of the true
# answers over the seeds; a constant lands within it of one answer with probability <= P_CONST
# (2*Phi(0.25) - 1 = 0.197 for a normal spread), and of all n checked ones with P_CONST ** n.
TIGHTEN_SIGMAS = 0.25
P_CONST = 0.2
MAX_CONSTANT_CHANCE = 0.01
CALIBRATION_SEEDS = 12  # reference-only seeds (never shown to the candidate) that measure the spread
_EPS_FLOOR = 8.0
# An extra input case can be ill-conditioned for the output dtype (mixed signs at large scale through bf16
# intermediates: the answer is a small difference of huge rounded terms). There the reference itself moves
# by more than the tolerance when its inputs move by one ulp, and a kernel that rounds in another valid
# order is "wrong" by the same amount. The case's atol grows by NOISE_FACTOR x that movement (its
# NOISE_QUANTILE over the outputs) when it exceeds the atol; the weak-check guard still fails a case that
# a trivial output would then pass. A seed in a scaled input regime (input_regimes.py) is measured the same
# way and widened alone: per-channel outlier scales through a bf16 softmax move the reference by ~0.1 where
# its own draw moves it by 0.006, and the seed of the reference's own draw keeps the task's tolerance.
NOISE_FACTOR = 2.0
NOISE_QUANTILE = 0.99


def _reference_error(e: ReferenceFailure) -> Failure:
    return Failure(kind="reference_error", summary=str(e), message=e.detail, stage="reference", line=e.line)


def _case_failure(case: InputCase, why: str) -> Failure:
    return Failure(
        kind="case_unusable",
        summary=f"{case.describe()} is unusable, not a verdict on the kernel: {why}"[:1000],
        stage="load",
    )


def _leaves(tree) -> list:
    import jax

    return list(jax.tree_util.tree_leaves(tree))


def reference_side(
    reference: str,
    size: str | None,
    case: InputCase | None = None,
    check_sizes: list[str] | None = None,
    resolve_checks: bool = False,
    with_values: bool = False,
    derive_seed: int | None = None,
):
    """Load the reference, resolve the size, trace it: (Reference, ReferenceSide). Raises nothing.

    `size` None is the reference's production size (the target). With `resolve_checks`, the check
    sizes are resolved too (`check_sizes`, default small + the derived size) into `side.check_sizes`.
    """
    import jax

    side = ReferenceSide(ok=False)
    try:
        ref = load_reference(reference)
    except UsageError as e:
        side.failure = Failure(kind="usage_error", summary=str(e), stage="load")
        return None, side
    except ReferenceFailure as e:
        side.failure = _reference_error(e)
        return None, side
    side.reference = ref.info
    ref.derive_seed = derive_seed  # the derived size is drawn from validate's seed offset
    try:
        if size is None:
            side.size, side.size_note = ref.default_size()
        else:
            if size not in ref.info.sizes:
                side.size_dims = ref.check_size(size).dims  # the derived size, or one precise error
            side.size, side.size_note = size, f"size {size!r} as asked"
        side.size_dims = side.size_dims or dict(ref.sizes_table.get(side.size, {}))
        if resolve_checks:
            if check_sizes:
                names, side.check_notes = list(dict.fromkeys(check_sizes)), []
            else:
                names, side.check_notes = ref.default_check_sizes()
            side.check_sizes = [ref.check_size(n) for n in names]
    except UsageError as e:
        side.failure = Failure(kind="usage_error", summary=str(e), stage="load")
        return ref, side
    except Exception as e:  # the reference breaks while its sizes are measured
        path = Path(ref.info.path)
        path = path / "reference.py" if path.is_dir() else path
        side.failure = _reference_error(reference_failure(e, path, "create_inputs (sizes)"))
        return ref, side
    path = Path(ref.info.path)
    path = path / "reference.py" if path.is_dir() else path
    try:
        shapes = ref.input_shapes(side.size, case)
    except UsageError as e:  # UnusableCaseError included
        side.failure = _case_failure(case, str(e)) if case else Failure(kind="usage_error", summary=str(e))
        return ref, side
    except Exception as e:
        side.failure = (
            _case_failure(case, f"the reference cannot build it: {type(e).__name__}: {e}")
            if case
            else _reference_error(reference_failure(e, path, "create_inputs"))
        )
        return ref, side
    try:
        jaxpr = jax.make_jaxpr(ref.workload)(*shapes)
    except Exception as e:
        side.failure = (
            _case_failure(case, f"the reference cannot trace it: {type(e).__name__}: {e}")
            if case
            else _reference_error(reference_failure(e, path, "tracing its workload under jit"))
        )
        return ref, side
    if ref.info.mesh is not None:
        from maxkernel.tpu_tools.hardware.mesh import shape_problem

        problem = shape_problem(ref.info.mesh, _leaves(shapes))
        if problem is None and len(jaxpr.out_avals) != 1:
            problem = f"MESH kernels return one array; the reference returns {len(jaxpr.out_avals)}"
        if problem is not None:
            side.failure = Failure(
                kind="reference_error", summary=f"the reference's MESH: {problem}", stage="reference"
            )
            return ref, side
    try:
        side.flops = ref.per_device_flops(side.size)
    except Exception:  # a get_flops that breaks costs the estimate its flop count, not the verdict
        side.flops = None
    side.input_specs = specs_of(_leaves(shapes))
    side.absent_inputs = list(ref.absent_inputs)
    side.output_specs = specs_of(jaxpr.out_avals)
    side.census = census_of(jaxpr)
    if with_values:  # the small integer tables the estimate reads data-dependent work from (seed 0)
        from maxkernel.tpu_tools.cost.data_work import small_int_inputs

        try:
            side.input_values = small_int_inputs(
                lambda: ref.create_inputs(side.size, 0, case), _leaves(shapes)
            )
        except Exception as e:  # costs the estimate its values (bounds stand), never the verdict
            side.input_values_note = f"create_inputs could not make them: {type(e).__name__}: {e}"[:300]
    side.ok = True
    return ref, side


def reference_specs_job(
    reference: str,
    size: str | None = None,
    check_sizes: list[str] | None = None,
    resolve_checks: bool = False,
    with_values: bool = False,
    derive_seed: int | None = None,
    target: str | None = None,
) -> dict:
    """Pool job: shapes and dtypes of the reference's inputs and outputs (compile needs nothing more),
    with `resolve_checks` the check sizes validation will run at, and with `with_values` the values of
    its small integer inputs (the estimate's data-dependent work). A Pallas reference is traced for
    `target` (chip_program.py)."""
    from maxkernel.tpu_tools.judged import job_env

    job_env.scrub()
    with chip_program.reference_target(target):
        _, side = reference_side(
            reference,
            size,
            check_sizes=check_sizes,
            resolve_checks=resolve_checks,
            with_values=with_values,
            derive_seed=derive_seed,
        )
    return side.model_dump(mode="json")


def reference_job(
    reference: str,
    size: str | None,
    seeds: list[int],
    inputs_dir: str,
    expected_dir: str,
    case: dict | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    target: str = "cpu",
    derive_seed: int | None = None,
) -> dict:
    """Pool job (judge side): inputs into `inputs_dir`; into `expected_dir`, per seed, the reference as
    `target` computes it (`expected_<seed>`) and the upcast oracle (`oracle_<seed>`, numerics.py).
    A Pallas reference is traced for `target` and run in TPU interpret mode off the chip (chip_program.py)."""
    from maxkernel.tpu_tools.judged import job_env

    job_env.scrub()
    input_case = InputCase.model_validate(case) if case is not None else None
    with chip_program.reference_target(target):
        ref, side = reference_side(reference, size, input_case, derive_seed=derive_seed)
        if not side.ok or ref is None or not memory.fits_host(ref, side):
            return side.model_dump(mode="json")
        with chip_program.interpreted(ref.pallas):
            return _reference_runs(ref, side, seeds, inputs_dir, expected_dir, input_case, atol, rtol, target)


def _interpreter_limit(ref: Reference, exc: BaseException, path: Path, stage: str) -> Failure | None:
    """A Pallas reference that jax's TPU interpreter cannot run (the interpreter raised, not the kernel):
    `interpret_unsupported`, naming jax's function and error. The baseline cannot be checked off the chip at
    this size; that is neither its failure nor a pass. None for anything else."""
    import traceback

    import jax

    from maxkernel.tpu_tools.judged.interpreter_limits import interpreter_raised

    if not ref.pallas or jax.default_backend() == "tpu":
        return None
    found = interpreter_raised(exc, path)
    if found is None or found.vetoed:
        return None
    return Failure(
        kind="interpret_unsupported",
        summary=(
            f"TPU interpret mode cannot run the reference (a Pallas kernel) while {stage}: jax's "
            f"{found.function} failed (entered through {found.entry}): {found.error}; the interpreter raised it, "
            "not the reference, so no candidate can be checked against it off the chip (on the chip it runs)"
        )[:1500],
        message="".join(traceback.format_exception(exc))[-6000:],
        stage="reference",
    )


def _reference_runs(
    ref: Reference,
    side: ReferenceSide,
    seeds: list[int],
    inputs_dir: str,
    expected_dir: str,
    input_case: InputCase | None,
    atol: float | None,
    rtol: float | None,
    target: str,
) -> dict:
    """reference_job's runs: per seed its inputs, the target's answer and the oracle's, then the tolerance."""
    import jax

    from maxkernel.tpu_tools.pool.workers import report_progress

    if ref.pallas and side.reference is not None:
        side.reference.notes.append(
            f"the reference is a Pallas kernel: traced as the {target} chip, "
            + ("run on the chip" if jax.default_backend() == "tpu" else "run in TPU interpret mode on CPU")
        )
    path = Path(ref.info.path)
    path = path / "reference.py" if path.is_dir() else path
    fn = jax.jit(ref.workload)
    answers: list[list[np.ndarray]] = []
    noise: list[float] = []  # an input case's movement: widens the case's tolerance (all its seeds)
    regime_noise: dict[int, float] = {}  # a regime seed's: widens that seed's alone
    runs: _NumericsRuns | None = None
    task_tolerance = choose_tolerance(
        side.output_specs[0].dtype if side.output_specs else "float32",
        ref_atol=ref.info.atol,
        ref_rtol=ref.info.rtol,
        atol=atol,
        rtol=rtol,
    )
    stage = ["create_inputs"]

    def answer(inputs) -> tuple[list, list[np.ndarray]]:
        """The reference's outputs on `inputs`: the host's run and the target's (numerics.py)."""
        nonlocal runs
        stage[0] = "running its workload"
        host = _leaves(jax.block_until_ready(fn(*inputs)))
        if runs is None:
            runs = _NumericsRuns(ref.workload, inputs, target)
        stage[0] = "running its workload at the target's precision"
        return host, runs.target(inputs, host)

    for position, seed in enumerate(seeds):
        # an extra case keeps its own distribution; otherwise the seed's place picks its regime
        regime: Regime = regime_at(position) if input_case is None else "reference"
        report_progress(f"reference seed {seed}" + ("" if regime == "reference" else f", {regime} inputs"))
        stage[0] = "create_inputs"
        try:
            own = ref.create_inputs(side.size, seed, input_case)
            inputs = own
            if regime != "reference":
                inputs, host, expected, note = _in_regime(own, regime, seed, answer, task_tolerance)
                if note is not None:
                    side.input_regime_notes[seed] = note
                    regime = "reference"
            else:
                host, expected = answer(inputs)
        except Exception as e:
            side.ok = False
            side.failure = (
                _case_failure(input_case, f"the reference fails on it: {type(e).__name__}: {e}")
                if input_case
                else _interpreter_limit(ref, e, path, stage[0])
                or _reference_error(reference_failure(e, path, stage[0]))
            )
            return side.model_dump(mode="json")
        side.input_regimes[seed] = regime
        bad = _nonfinite(expected)
        if bad:
            why = f"the reference answers with {bad} NaN/inf value(s) (seed {seed}): no ground truth"
            side.ok = False
            side.failure = (
                _case_failure(input_case, why)
                if input_case
                else Failure(kind="reference_error", summary=why, stage="reference")
            )
            return side.model_dump(mode="json")
        assert runs is not None
        save_arrays(inputs_dir, f"inputs_{seed}", _leaves(inputs))
        save_arrays(expected_dir, f"expected_{seed}", expected)
        report_progress(f"reference seed {seed}, the upcast oracle")
        oracle = runs.oracle(inputs)
        if oracle is not None:
            save_arrays(expected_dir, f"oracle_{seed}", oracle)
            runs.explain(host, expected, oracle)
        answers.append(f32([np.asarray(e) for e in expected]))
        moves = input_case is not None or side.input_regimes[seed] != "reference"
        if moves and atol is None and rtol is None:
            report_progress(f"reference seed {seed}, inputs one ulp away")
            try:
                moved = _leaves(jax.block_until_ready(fn(*_one_ulp_away(inputs, seed))))
                movement = _movement(expected, moved)
                if input_case is not None:
                    noise.append(movement)
                else:
                    regime_noise[seed] = movement
            except Exception:  # noqa: BLE001 - best effort: without it the seed keeps the task's tolerance
                pass
    side.tolerance = task_tolerance
    if atol is None and rtol is None and ref.info.seedable and _near_constant(answers, side.tolerance):
        report_progress("reference calibration seeds")
        # drawn in the regimes the checked seeds ran, in turn: the spread a constant must beat is theirs
        ran = [side.input_regimes[s] for s in seeds]
        base = secrets.randbelow(2**31 - CALIBRATION_SEEDS)
        for k, seed in enumerate(range(base, base + CALIBRATION_SEEDS)):
            if k == 2 and len(seeds) == 1 and not _near_constant(answers, side.tolerance):
                break  # one checked seed said nothing; two more show the outputs do move: no guard needed
            try:
                drawn = apply_regime(ref.create_inputs(side.size, seed, input_case), ran[k % len(ran)], seed)
                outs = f32([np.asarray(e) for e in _leaves(jax.block_until_ready(fn(*drawn)))])
            except Exception:  # noqa: BLE001 - calibration is best effort; the checked seeds ran
                break
            if not _nonfinite(outs):  # a checked seed with these would have fallen back: skip it
                answers.append(outs)
        dtypes = [s.dtype for s in side.output_specs]
        side.tolerance, side.cannot_tell = constant_guard(answers, side.tolerance, dtypes, len(seeds))
    if noise and (wide := _widened(side.tolerance, max(noise), "this case", ", worst seed")) is not None:
        side.tolerance = wide
    for seed, movement in regime_noise.items():
        whose = f"seed {seed}'s {side.input_regimes[seed]} inputs"
        if (wide := _widened(side.tolerance, movement, whose)) is not None:
            side.seed_tolerances[seed] = wide
    save_specs(Path(inputs_dir) / "input_specs.json", side.input_specs)
    side.numerics = runs.numerics() if runs is not None else None
    return side.model_dump(mode="json")


def _widened(t: Tolerance, movement: float, whose: str, which: str = "") -> Tolerance | None:
    """`t` with its atol grown by NOISE_FACTOR x the reference's own one-ulp `movement`, said in its source;
    None where that stays within the atol (a well-conditioned case or seed keeps its tolerance)."""
    if NOISE_FACTOR * movement <= t.atol:
        return None
    return Tolerance(
        atol=t.atol + NOISE_FACTOR * movement,
        rtol=t.rtol,
        source=(
            f"{t.source}, widened for {whose}: with every input one ulp away the reference itself moves by "
            f"{movement:.3g} ({NOISE_QUANTILE:.0%} of elements{which}), over its atol={t.atol:g}; "
            f"atol += {NOISE_FACTOR:g} x that"
        ),
    )


def _nonfinite(outputs) -> int:
    """How many NaN/inf values the float outputs hold."""
    return sum(int((~np.isfinite(np.asarray(e, np.float32))).sum()) for e in outputs if _is_float(e))


def _zeros_pass(outputs, tol: Tolerance) -> bool:
    """Would all-zero outputs pass the elementwise tolerance against these?"""
    return all(bool(within(e, np.zeros_like(e), tol).all()) for e in f32([np.asarray(o) for o in outputs]))


def _in_regime(own, regime: Regime, seed: int, answer, tol: Tolerance):
    """(inputs, host, expected, note) for a seed in `regime`; note is None when the regime ran.

    The seed falls back to the reference's own draw `own` (and says why) where the regime's inputs leave the
    reference without ground truth that its own draw has (NaN/inf: a naive exp overflowing, or it raises on
    them), or make its outputs so small that zeros pass where they do not on its own draw.
    """
    why, trivial = None, False
    try:
        inputs = apply_regime(own, regime, seed)
        host, expected = answer(inputs)
        if bad := _nonfinite(expected):
            why = f"the reference answers {bad} NaN/inf value(s) on them"
        elif _zeros_pass(expected, tol):
            why, trivial = "zeros pass on the reference's outputs on them", True
    except Exception as e:  # noqa: BLE001 - its own draw decides: it raises there too, or it stands in
        why = f"the reference fails on them: {type(e).__name__}: {e}"[:300]
    if why is None:
        return inputs, host, expected, None
    own_host, own_expected = answer(own)
    if trivial and _zeros_pass(own_expected, tol):
        return inputs, host, expected, None  # no weaker than its own draw: the regime stands
    note = f"{regime} inputs fell back to the reference's own draw: {why}"
    return own, own_host, own_expected, note


class _NumericsRuns:
    """The reference's three runs (numerics.py): the host's, the target's (where a TPU computes a dot or
    convolution differently from the host) and the upcast oracle. Any of the last two that cannot be built
    or run is said in `numerics()`; the host's run then stands in for the target's, and without an oracle
    the elementwise tolerance alone decides."""

    def __init__(self, workload, inputs, target: str) -> None:
        from maxkernel.tpu_tools.problem import numerics

        self.on_tpu = target.startswith("tpu")
        self.differs: list[str] = []
        self.target_how = f"the host's XLA ({target}: the host's numerics are the target's)"
        self._target = None
        self._oracle = None
        self.oracle_how: str | None = None
        self.oracle_missing: str | None = None
        self.host_err: list[float] = []
        self.ref_err: list[float] = []
        if self.on_tpu:
            self.differs = numerics.differs_on_target(workload, tuple(inputs))
            if self.differs:
                try:
                    self._target, self.target_how = numerics.as_computed(workload, tuple(inputs), "tpu")
                except Exception as e:  # noqa: BLE001 - said in the verdict: the host's run stands in
                    self.target_how = (
                        f"the host's XLA: the target's numerics could not be built ({type(e).__name__}: {e})"
                    )[:500]
            else:
                self.target_how = f"the host's XLA: every dot and convolution in the reference runs on {target} as on the host"
        try:
            self._oracle, self.oracle_how = numerics.as_computed(workload, tuple(inputs), "oracle")
        except Exception as e:  # noqa: BLE001 - a program the widening cannot trace keeps the tolerance rule
            self.oracle_missing = f"the oracle could not be built: {type(e).__name__}: {e}"[:500]

    def target(self, inputs, host: list) -> list[np.ndarray]:
        if self._target is None:
            return [np.asarray(h) for h in host]
        import jax

        return [np.asarray(x) for x in jax.block_until_ready(self._target(*_leaves(inputs)))]

    def oracle(self, inputs) -> list[np.ndarray] | None:
        if self._oracle is None:
            return None
        try:
            out = [np.asarray(x) for x in self._oracle(*_leaves(inputs))]
        except Exception as e:  # noqa: BLE001 - as above: said, and the tolerance decides
            self._oracle, self.oracle_how = None, None
            self.oracle_missing = f"the oracle failed to run: {type(e).__name__}: {e}"[:500]
            return None
        if any(_is_float(o) and not np.isfinite(o.astype(np.float64)).all() for o in out):
            self._oracle, self.oracle_how = None, None
            self.oracle_missing = "the oracle answers NaN/inf where the reference has numbers"
            return None
        return out

    def explain(self, host: list, expected: list, oracle: list) -> None:
        """The first seed's max errors against the oracle: the target's reference, and the host's where it differs."""
        if self.ref_err:
            return
        for h, e, o in zip(host, expected, oracle, strict=True):
            o64 = np.asarray(o, np.float64)
            self.ref_err.append(float(np.abs(np.asarray(e, np.float64) - o64).max()) if o64.size else 0.0)
            if self._target is not None:
                self.host_err.append(
                    float(np.abs(np.asarray(h, np.float64) - o64).max()) if o64.size else 0.0
                )

    def numerics(self):
        from maxkernel.tpu_tools.judge.error_rule import FACTOR, RULE
        from maxkernel.tpu_tools.reports import Numerics

        return Numerics(
            target=self.target_how,
            oracle=self.oracle_how,
            oracle_missing=self.oracle_missing,
            differs_from_host=self.differs,
            host_max_err=self.host_err,
            reference_max_err=self.ref_err,
            factor=FACTOR,
            rule=RULE if self.oracle_how else "the elementwise tolerance against the reference (no oracle)",
        )


def _one_ulp_away(inputs, seed: int) -> tuple:
    """Every floating-point input moved by one ulp of its dtype, up or down at random (the rest kept)."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)

    def move(x):
        if not hasattr(x, "dtype") or not jnp.issubdtype(x.dtype, jnp.floating):
            return x
        up = jnp.nextafter(x, jnp.full_like(x, jnp.inf))
        down = jnp.nextafter(x, jnp.full_like(x, -jnp.inf))
        return jnp.where(jnp.asarray(rng.random(np.shape(x)) < 0.5), up, down)

    return tuple(jax.tree_util.tree_map(move, tuple(inputs)))


def _movement(expected: list, moved: list) -> float:
    """How far the outputs move (NOISE_QUANTILE of |change| over finite float elements, worst leaf)."""
    worst = 0.0
    for e, m in zip(expected, moved, strict=True):
        if not _is_float(e):
            continue
        d = np.abs(np.asarray(m, np.float64) - np.asarray(e, np.float64)).ravel()
        d = d[np.isfinite(d)]
        if d.size:
            worst = max(worst, float(np.quantile(d, NOISE_QUANTILE)))
    return worst


def _near_constant(answers: list[list[np.ndarray]], tol: Tolerance) -> bool:
    """Would one constant (the mean answer) pass every seed so far? (True with a single seed: can't tell yet.)"""
    leaves = [np.stack([x.astype(np.float64) for x in group]) for group in zip(*answers, strict=True)]
    return all(bool(within(leaf, leaf.mean(axis=0), tol).all()) for leaf in leaves)


def _is_float(x) -> bool:
    return np.dtype(x.dtype).kind in "fcV" or "float" in str(x.dtype)


def run_order(seeds: list[int], repeats: int, rng: random.Random) -> list[int]:
    """Every seed `repeats` times: shuffled rounds, no set run twice in a row when there are others."""
    order: list[int] = []
    for _ in range(repeats):
        rnd = list(seeds)
        rng.shuffle(rnd)
        if order and len(rnd) > 1 and rnd[0] == order[-1]:
            rnd[0], rnd[-1] = rnd[-1], rnd[0]
        order += rnd
    return order


# ---------------------------------------------------------------------------------- the comparison


def f32(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """bfloat16 & co. as float32 for comparison (exact: every bf16 is an f32)."""
    return [a.astype(np.float32) if not np.dtype(a.dtype).type.__module__ == "numpy" else a for a in arrays]


class Judgement(BaseModel):
    per_seed: list[SeedResult] = []
    tolerance: Tolerance
    failure: Failure | None = None
    weak_check: bool = False
    warnings: list[str] = []
    runs_checked: int = 0


def _eps(dtype: str) -> float:
    try:
        from maxkernel.tpu_tools.pool.handover import _np_dtype

        dt = _np_dtype(dtype)
        return float(np.finfo(dt).eps) if dt.kind == "f" else 0.0
    except (TypeError, ValueError):
        return float(np.finfo(np.float32).eps)


def constant_guard(
    expected: list[list[np.ndarray]], tol: Tolerance, dtypes: list[str], checked: int
) -> tuple[Tolerance, str | None]:
    """A tolerance under which a memorized constant fails, or (tol, why the check cannot tell).

    `expected`: the answers on the checked seeds followed by calibration seeds the candidate never sees.
    Scalar and near-constant outputs (a mean loss) barely move between seeds, so under the task's tolerance
    a constant passes. If one does (and zeros do not: then the outputs are below the tolerance's scale and
    the weak-check guard speaks), the tolerance becomes TIGHTEN_SIGMAS x the answers' spread (std over
    all seeds): a constant then passes `checked` seeds with probability <= P_CONST ** checked, while an
    honest kernel's rounding error sits far below that spread.
    """
    if len(expected) < 3:
        return tol, None
    leaves = [np.stack([x.astype(np.float64) for x in group]) for group in zip(*expected, strict=True)]
    const = [leaf.mean(axis=0) for leaf in leaves]
    passes = all(
        bool(within(leaf[i], c, tol).all())
        for leaf, c in zip(leaves, const, strict=True)
        for i in range(len(expected))
    )
    if not passes:
        return tol, None
    if all(bool(within(leaf, np.zeros_like(leaf), tol).all()) for leaf in leaves):
        return tol, None
    sigma = min(float(np.median(leaf.std(axis=0))) for leaf in leaves)
    floor = max(
        _EPS_FLOOR * _eps(dtype) * float(np.max(np.abs(leaf)))
        for leaf, dtype in zip(leaves, dtypes, strict=True)
    )
    atol = TIGHTEN_SIGMAS * sigma
    chance = P_CONST**checked
    if atol <= floor:
        return tol, (
            f"a constant passes on every seed: the answers spread over the seeds (std {sigma:.3g}) less than "
            f"the output dtype resolves ({floor:.3g})"
        )
    if chance > MAX_CONSTANT_CHANCE:
        return tol, (
            f"a constant passes the task's tolerance on every seed; with {checked} seed(s) even the tightened "
            f"check would pass one with probability {chance:.1%} (use at least {seeds_needed()} seeds)"
        )
    return (
        Tolerance(
            atol=atol,
            rtol=0.0,
            source=f"tightened: a constant passes the task's atol={tol.atol:g} rtol={tol.rtol:g} on every seed, "
            f"so {TIGHTEN_SIGMAS:g} x the answers' std over {len(expected)} seeds ({sigma:.3g})",
        ),
        None,
    )


def seeds_needed() -> int:
    """The fewest seeds at which the tightened check passes a constant with chance <= MAX_CONSTANT_CHANCE."""
    n = 1
    while P_CONST**n > MAX_CONSTANT_CHANCE:
        n += 1
    return n


def judge_runs(
    expected: dict[int, list[np.ndarray]],
    runs: list[tuple[int, int, list[np.ndarray]]],
    tol: Tolerance,
    dtypes: list[str],
    inputs: dict[int, list[np.ndarray]],
    cannot_tell: str | None = None,
    oracle: dict[int, list[np.ndarray]] | None = None,
    factor: float = FACTOR,
    seed_tols: dict[int, Tolerance] | None = None,
) -> Judgement:
    """Every run against the expected outputs of its input set (the reference as the target computes it)
    and, where there is one, the set's upcast oracle (error_rule.py); runs of one set must agree. A seed in
    `seed_tols` is held to its own tolerance (a regime seed's widened one), every other to `tol`."""
    j = Judgement(tolerance=tol)
    oracle = oracle or {}
    seed_tols = seed_tols or {}

    def tol_of(seed: int) -> Tolerance:
        return seed_tols.get(seed, tol)

    ref_errors = {
        seed: [reference_error(o, e) for o, e in zip(oracle[seed], expected[seed], strict=True)]
        for seed in expected
        if seed in oracle
    }
    weak_everywhere: set[str] | None = None
    first: dict[int, SeedResult] = {}
    bad_runs: list[tuple[int, int, SeedResult]] = []
    outputs_by_seed: dict[int, list[list[np.ndarray]]] = {}
    for call, (seed, repeat, actual) in enumerate(runs):
        result = compare_outputs(
            seed,
            expected[seed],
            f32(actual),
            tol_of(seed),
            oracle.get(seed),
            ref_errors.get(seed),
            dtypes,
            factor,
        )
        j.runs_checked += 1
        outputs_by_seed.setdefault(seed, []).append(actual)
        if seed not in first:
            first[seed] = result
        if not result.ok:
            bad_runs.append((call, repeat, result))
    for seed in expected:
        result = first[seed]
        result.trivial_outputs_passing = [
            t
            for t in trivial_outputs_passing(
                expected[seed],
                inputs.get(seed, []),
                tol_of(seed),
                oracle.get(seed),
                ref_errors.get(seed),
                dtypes,
            )
            if t != "reference mean" or any(e.size > 1 for e in expected[seed])
        ]
        if cannot_tell:
            result.trivial_outputs_passing.append("a constant")
        result.tolerance = seed_tols.get(seed)
        weak = set(result.trivial_outputs_passing)
        weak_everywhere = weak if weak_everywhere is None else weak_everywhere & weak
        j.per_seed.append(result)
    for seed, outs in outputs_by_seed.items():
        for other in outs[1:]:
            if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(outs[0], other, strict=True)):
                j.warnings.append(f"runs of seed {seed} differ from each other (all within tolerance)")
                break
    if bad_runs:
        # name the first wrong run of the first wrong seed (per_seed's order), so summary and evidence agree
        order = {seed: i for i, seed in enumerate(expected)}
        call, repeat, r = min(bad_runs, key=lambda b: (order[b[2].seed], b[0]))
        seeds_bad = sorted({r2.seed for _, _, r2 in bad_runs})
        bad_tol = tol_of(r.seed)
        rule = "".join(
            f"; output {e.leaf if len(r.errors) > 1 else ''}{' ' if len(r.errors) > 1 else ''}is {e.finding}"
            for e in r.errors
            if not e.ok and e.finding
        )
        j.failure = Failure(
            kind="output_mismatch",
            summary=(
                f"wrong on {len(bad_runs)}/{len(runs)} runs (seeds {seeds_bad}): call {call + 1} (seed {r.seed}, "
                f"run {repeat + 1}) has {r.mismatch_fraction:.2%} of elements outside atol={bad_tol.atol:g} "
                f"rtol={bad_tol.rtol:g}{' (its seed widened)' if r.seed in seed_tols else ''} of the reference as the target computes it; worst at {r.worst_index}: "
                f"expected {r.worst_expected:.6g}, got {r.worst_actual:.6g} (max abs err {r.max_abs_err:.3g}"
                f"{f', {r.nan_count} NaN' if r.nan_count else ''}){rule}"
            ),
            stage="compare",
        )
        for res in j.per_seed:
            if any(r2.seed == res.seed for _, _, r2 in bad_runs):
                res.ok = False
    elif weak_everywhere:
        j.weak_check = True
        why = f"; {cannot_tell}" if cannot_tell else ""
        j.failure = Failure(
            kind="weak_check",
            summary=(
                f"the check cannot tell: a trivial output ({', '.join(sorted(weak_everywhere))}) also passes "
                f"atol={tol.atol:g} rtol={tol.rtol:g} on every seed{why}"
            ),
            stage="compare",
        )
    return j
