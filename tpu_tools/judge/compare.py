"""Elementwise comparison with evidence (max errors, worst index, NaN/Inf) and the weak-check guard."""

from __future__ import annotations

import numpy as np

from maxkernel.tpu_tools.judge.error_rule import FACTOR, ReferenceError, judge_leaf, leaf_passes, within
from maxkernel.tpu_tools.reports import SeedResult, Tolerance


def tails(wrong: np.ndarray) -> list[int] | None:
    """Per axis, where the trailing run of all-wrong slices starts, if the wrong elements are exactly
    those slabs (a remainder a floored grid never wrote); None otherwise."""
    starts = []
    for axis in range(wrong.ndim):
        whole = wrong.all(axis=tuple(a for a in range(wrong.ndim) if a != axis))
        right = np.nonzero(~whole)[0]
        starts.append(int(right[-1]) + 1 if right.size else 0)
    covered = np.zeros_like(wrong)
    for axis, start in enumerate(starts):
        index = [None] * wrong.ndim
        index[axis] = slice(None)
        covered |= (np.arange(wrong.shape[axis]) >= start)[tuple(index)]
    if any(0 < s < n for s, n in zip(starts, wrong.shape, strict=True)) and np.array_equal(covered, wrong):
        return starts
    return None


def compare_outputs(
    seed: int,
    expected: list[np.ndarray],
    actual: list[np.ndarray],
    tol: Tolerance,
    oracle: list[np.ndarray] | None = None,
    ref_errors: list[ReferenceError] | None = None,
    dtypes: list[str] | None = None,
    factor: float = FACTOR,
) -> SeedResult:
    """Compare every output leaf; report the worst element over all of them.

    `expected` is the reference as the target computes it. A leaf passes where the elementwise tolerance
    holds everywhere, or (with an `oracle`) where the error rule holds (error_rule.py); the elementwise
    figures (mismatch fraction, worst element) describe the tolerance either way.
    """
    errors = []
    total = mismatched = 0
    max_abs = max_rel = 0.0
    worst: tuple[float, list[int], float, float] | None = None
    nan = inf = ref_nan = 0
    box: dict = {}  # where the first wrong output is wrong (the shape contract reads it)
    for leaf, (e, a) in enumerate(zip(expected, actual, strict=True)):
        e64 = e.astype(np.float64)
        a64 = a.astype(np.float64)
        ok = within(e, a, tol)
        leaf_error = judge_leaf(
            leaf,
            e,
            a,
            tol,
            ok,
            oracle[leaf] if oracle is not None else None,
            ref_errors[leaf] if ref_errors is not None else None,
            dtypes[leaf] if dtypes else str(e.dtype),
            factor,
        )
        errors.append(leaf_error)
        if not box and not leaf_error.ok and ok.ndim:
            wrong = ~ok
            box = {
                "mismatch_tails": tails(wrong),
                "mismatch_shape": list(ok.shape),
                "mismatch_leaf": leaf if len(expected) > 1 else None,
                "mismatch_unwritten": bool(np.isnan(a64[wrong]).all() and not np.isnan(e64[wrong]).any()),
            }
        total += ok.size
        mismatched += int(ok.size - ok.sum())
        nan += int(np.isnan(a64).sum())
        inf += int(np.isinf(a64).sum())
        ref_nan += int(np.isnan(e64).sum())
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            diff = np.abs(a64 - e64)
            diff = np.where(np.isnan(e64) & np.isnan(a64), 0.0, diff)
            diff = np.where(np.isnan(diff), np.inf, diff)
            rel = diff / np.maximum(np.abs(e64), 1e-30)
        if diff.size:
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float(np.where(diff == 0, 0.0, rel).max()))
            # worst = the element furthest outside its tolerance band
            excess = diff - (tol.atol + tol.rtol * np.abs(np.nan_to_num(e64)))
            idx = np.unravel_index(int(np.argmax(excess)), excess.shape)
            score = float(excess[idx])
            if worst is None or score > worst[0]:
                index = ([leaf] if len(expected) > 1 else []) + [int(i) for i in idx]
                worst = (score, index, float(e64[idx]), float(a64[idx]))
    return SeedResult(
        seed=seed,
        ok=all(x.ok for x in errors),
        errors=errors,
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        mismatch_fraction=mismatched / total if total else 0.0,
        worst_index=worst[1] if worst else None,
        worst_expected=worst[2] if worst else None,
        worst_actual=worst[3] if worst else None,
        nan_count=nan,
        inf_count=inf,
        reference_nan_count=ref_nan,
        **box,
    )


def trivial_outputs_passing(
    expected: list[np.ndarray],
    inputs: list[np.ndarray],
    tol: Tolerance,
    oracle: list[np.ndarray] | None = None,
    ref_errors: list[ReferenceError] | None = None,
    dtypes: list[str] | None = None,
) -> list[str]:
    """Which trivial 'kernels' (all zeros, the reference's mean, a copy of an input) would also pass,
    by the tolerance or by the error rule against the oracle."""
    passing = []
    candidates: dict[str, list[np.ndarray]] = {
        "zeros": [np.zeros_like(e, dtype=np.float64) for e in expected],
        "reference mean": [
            np.full(e.shape, np.nanmean(e.astype(np.float64)) if e.size else 0.0) for e in expected
        ],
    }
    for i, x in enumerate(inputs):
        if len(expected) == 1 and x.shape == expected[0].shape:
            candidates[f"copy of input {i}"] = [x.astype(np.float64)]
    for name, fake in candidates.items():
        if all(
            leaf_passes(
                e,
                f,
                tol,
                oracle[i] if oracle is not None else None,
                ref_errors[i] if ref_errors is not None else None,
                dtypes[i] if dtypes else str(e.dtype),
            )
            for i, (e, f) in enumerate(zip(expected, fake, strict=True))
        ):
            passing.append(name)
    return passing
