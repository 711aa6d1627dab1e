"""The field's acceptance rule: a kernel's error against an upcast oracle, measured in units of the reference's.

FlashAttention's tests accept a kernel whose max error against an fp32-upcast oracle is at most twice the
max error of a same-precision implementation against that oracle. Here the same-precision implementation is
the reference as the target computes it (problem/numerics.py), the oracle is the reference's own program with
every float widened and every dot at HIGHEST, and the rule holds for the max and for the mean error. Each is
allowed the larger of FACTOR x the reference's own and a floor of FLOOR_ULPS of the output dtype at the
oracle's scale: the floor decides only where the reference is (near) exact, and then leaves room for a
kernel's own final rounding, no more; it is never added to the FACTOR x. The signed mean error (a bias) is
allowed the larger of FACTOR x the reference's bias plus BIAS_SHARE of the reference's mean error, and the
same floor. A leaf also passes where the elementwise tolerance against the target-precision reference holds
everywhere; integer leaves are exact (against that reference or the oracle).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from pydantic import BaseModel

from maxkernel.tpu_tools.reports import LeafError, Tolerance

FACTOR = 2.0  # FlashAttention's tests: at most 2x a same-precision implementation's error
FLOOR_ULPS = 0.5  # half an ulp of the output dtype at the oracle's scale: room for one final rounding
# A systematic error (the signed mean) is allowed FACTOR x the reference's own plus BIAS_SHARE of its mean
# absolute error: rounding errors of an honest kernel average out (0.2-0.7% of its mean error on the tests'
# projections and MLP), a scaled or shifted answer inside the noise does not (100%). Where the reference is
# (near) exact the same half-ulp floor as the mean's decides instead: one final rounding can move the mean
# of a small output (a scalar's is its error) by that much.
BIAS_SHARE = 0.1
RULE = (
    f"each output passes where it is within the elementwise tolerance of the reference as the target computes "
    f"it, or where, against the upcast oracle, its max and mean errors are each at most the larger of "
    f"{FACTOR:g}x the reference's own and a floor of {FLOOR_ULPS:g} ulp of the output dtype (at the oracle's "
    f"max and mean magnitude; the floor decides only where the reference is near exact, and is never added "
    f"to the {FACTOR:g}x), and its signed mean error (a bias) is at most the larger of {FACTOR:g}x the "
    f"reference's plus {BIAS_SHARE:g} of the reference's mean error and that same floor at the mean magnitude"
)


class ReferenceError(BaseModel):
    """The target-precision reference's own error against the oracle, for one leaf of one seed."""

    max_err: float
    mean_err: float
    bias: float = 0.0
    scale_max: float
    scale_mean: float


def _float(x: np.ndarray) -> bool:
    return np.dtype(x.dtype).kind == "f" or "float" in str(x.dtype)


def eps_of(dtype: str) -> float:
    """The output dtype's machine epsilon (bfloat16's 2**-7 included); float32's for anything else."""
    import ml_dtypes

    from maxkernel.tpu_tools.pool.handover import _np_dtype

    try:
        return float(ml_dtypes.finfo(_np_dtype(dtype)).eps)
    except (TypeError, ValueError):
        return float(np.finfo(np.float32).eps)


def _abs_err(oracle: np.ndarray, x: np.ndarray) -> np.ndarray:
    """|x - oracle| in float64; where the oracle is not finite, 0 if x equals it and inf otherwise;
    a NaN in x where the oracle has a number is inf."""
    o = oracle.astype(np.float64)
    a = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(a - o)
    finite = np.isfinite(o)
    same = (a == o) | (np.isnan(a) & np.isnan(o))
    d = np.where(finite, d, np.where(same, 0.0, np.inf))
    return np.where(np.isnan(d), np.inf, d)


def within(expected: np.ndarray, actual: np.ndarray, tol: Tolerance) -> np.ndarray:
    """Elementwise pass mask: |a - e| <= atol + rtol*|e|; NaN passes only where the reference is NaN too."""
    e = expected.astype(np.float64)
    a = actual.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.abs(a - e) <= tol.atol + tol.rtol * np.abs(e)
        ok |= a == e  # equal infinities
    ok |= np.isnan(e) & np.isnan(a)
    return ok


def reference_error(oracle: np.ndarray, reference: np.ndarray) -> ReferenceError:
    d = _abs_err(oracle, reference)
    o = np.abs(np.where(np.isfinite(oracle.astype(np.float64)), oracle.astype(np.float64), 0.0))
    signed = reference.astype(np.float64) - oracle.astype(np.float64)
    signed = signed[np.isfinite(signed)]
    return ReferenceError(
        bias=abs(float(signed.mean())) if signed.size else 0.0,
        max_err=float(d.max()) if d.size else 0.0,
        mean_err=float(d.mean()) if d.size else 0.0,
        scale_max=float(o.max()) if o.size else 0.0,
        scale_mean=float(o.mean()) if o.size else 0.0,
    )


def judge_leaf(
    leaf: int,
    expected: np.ndarray,
    actual: np.ndarray,
    tol: Tolerance,
    elementwise_ok: np.ndarray,
    oracle: np.ndarray | None,
    ref: ReferenceError | None,
    out_dtype: str,
    factor: float = FACTOR,
) -> LeafError:
    """Does this leaf pass: elementwise against the target-precision reference, or by the error rule?"""
    ew = bool(elementwise_ok.all())
    if not _float(expected) or not _float(actual):  # integers and booleans: exact
        exact = np.array_equal(expected, actual) or (
            oracle is not None and oracle.shape == actual.shape and np.array_equal(oracle, actual)
        )
        return LeafError(
            leaf=leaf,
            ok=bool(exact or ew),
            rule="exact" if exact or not ew else "elementwise",
            elementwise_ok=ew,
        )
    if oracle is None or ref is None:
        return LeafError(leaf=leaf, ok=ew, rule="no_oracle", elementwise_ok=ew)
    d = _abs_err(oracle, actual)
    eps = eps_of(out_dtype)
    k_max = float(d.max()) if d.size else 0.0
    k_mean = float(d.mean()) if d.size else 0.0
    floor_max = FLOOR_ULPS * eps * ref.scale_max
    floor_mean = FLOOR_ULPS * eps * ref.scale_mean
    ok_max = k_max <= allowance(factor * ref.max_err, floor_max).value
    ok_mean = k_mean <= allowance(factor * ref.mean_err, floor_mean).value
    signed = actual.astype(np.float64) - oracle.astype(np.float64)
    signed = signed[np.isfinite(signed)]
    k_bias = abs(float(signed.mean())) if signed.size else 0.0
    bias_allowed = allowance(factor * ref.bias + BIAS_SHARE * ref.mean_err, floor_mean).value
    ok_bias = k_bias <= bias_allowed
    out = LeafError(
        leaf=leaf,
        kernel_bias=k_bias,
        reference_bias=ref.bias,
        bias_allowed=bias_allowed,
        ok=ew or (ok_max and ok_mean and ok_bias),
        rule="elementwise" if ew else "error_ratio",
        elementwise_ok=ew,
        kernel_max_err=k_max,
        kernel_mean_err=k_mean,
        reference_max_err=ref.max_err,
        reference_mean_err=ref.mean_err,
        ratio_max=_ratio(k_max, ref.max_err),
        ratio_mean=_ratio(k_mean, ref.mean_err),
        factor=factor,
        floor_max=floor_max,
        floor_mean=floor_mean,
    )
    if d.size:
        idx = np.unravel_index(int(np.argmax(d)), d.shape)
        out.worst_index = [int(i) for i in idx]
        out.worst_oracle = float(oracle.astype(np.float64)[idx])
        out.worst_kernel = float(actual.astype(np.float64)[idx])
        out.worst_reference = float(expected.astype(np.float64)[idx])
    out.finding = finding(out)
    return out


class Allowance(NamedTuple):
    """What one error may reach, and whether the floor (not FACTOR x the reference's error) set it."""

    value: float
    by_floor: bool


def allowance(scaled: float, floor: float) -> Allowance:
    """The larger of the reference-scaled allowance and the floor: the floor decides only where the reference
    is (near) exact, and is never added to the scaled part."""
    return Allowance(floor, True) if floor > scaled else Allowance(scaled, False)


def allowances(e: LeafError) -> tuple[Allowance, Allowance, Allowance]:
    """The max, mean and bias allowances a float leaf was judged by, rebuilt from its numbers."""
    ref_max, ref_mean = e.reference_max_err or 0.0, e.reference_mean_err or 0.0
    floor_mean = e.floor_mean or 0.0
    bias = allowance(e.factor * (e.reference_bias or 0.0) + BIAS_SHARE * ref_mean, floor_mean)
    return allowance(e.factor * ref_max, e.floor_max or 0.0), allowance(e.factor * ref_mean, floor_mean), bias


def _ratio(k: float, r: float) -> float | None:
    if r > 0:
        return k / r
    return None if k == 0 else float("inf")


def _x(r: float | None) -> str:
    return "n/a" if r is None else ("inf" if r == float("inf") else f"{r:.2f}x")


def _share(k: float, allowed: float) -> float:
    """k as a share of what was allowed (1 is the edge); inf where nothing was allowed and k is not 0."""
    if allowed > 0:
        return k / allowed
    return 0.0 if k == 0 else float("inf")


def _of(k: float, allowed: float) -> str:
    share = _share(k, allowed)
    return "inf times" if share == float("inf") else f"{share:.2f} of"


def _basis(a: Allowance, factor: float, ref: float) -> str:
    if a.by_floor:
        return f"floor of {FLOOR_ULPS:g} ulp applied: {factor:g}x the reference's {ref:.3g} is less"
    return f"{factor:g}x the reference's {ref:.3g}"


def _against_allowed(e: LeafError) -> str:
    """The max and mean errors, each as a share of the allowance actually applied and what set it."""
    a_max, a_mean, _ = allowances(e)
    return (
        f"error against the oracle max {e.kernel_max_err:.3g}, {_of(e.kernel_max_err, a_max.value)} the "
        f"{a_max.value:.3g} allowed ({_basis(a_max, e.factor, e.reference_max_err or 0.0)}); mean "
        f"{e.kernel_mean_err:.3g}, {_of(e.kernel_mean_err, a_mean.value)} the {a_mean.value:.3g} allowed "
        f"({_basis(a_mean, e.factor, e.reference_mean_err or 0.0)})"
    )


def finding(e: LeafError) -> str:
    """One sentence from the numbers: how the kernel's error compares with what the rule allowed it."""
    if e.rule == "elementwise":
        return (
            f"within the elementwise tolerance of the target-precision reference (error against the oracle max "
            f"{e.kernel_max_err:.3g} / mean {e.kernel_mean_err:.3g}, the reference's max "
            f"{e.reference_max_err:.3g} / mean {e.reference_mean_err:.3g})"
        )
    if e.ok:
        return f"passes the error rule: {_against_allowed(e)}"
    a_max, a_mean, a_bias = allowances(e)
    mean_bad = e.kernel_mean_err > a_mean.value
    max_bad = e.kernel_max_err > a_max.value
    if mean_bad:
        how = "less accurate than the reference"
    elif not max_bad:
        bias_basis = (
            f"the floor of {FLOOR_ULPS:g} ulp"
            if a_bias.by_floor
            else f"{e.factor:g}x the reference's {e.reference_bias:.3g} plus {BIAS_SHARE:g} of its mean error"
        )
        how = (
            f"biased: within the allowed max and mean error, but its signed mean error {e.kernel_bias:.3g} is "
            f"over the {a_bias.value:.3g} allowed ({bias_basis}): a systematic shift, not rounding"
        )
    else:
        how = (
            "different from the reference at a few elements (within the allowed mean error, "
            f"but its worst element is {_x(e.ratio_max)} the reference's worst)"
        )
    at = ""
    if e.worst_index is not None:
        at = (
            f"; worst at {e.worst_index}: oracle {e.worst_oracle:.6g}, kernel {e.worst_kernel:.6g}, "
            f"reference {e.worst_reference:.6g}"
        )
    return (
        f"{how}: {_against_allowed(e)}; against the reference's (at the target's precision) max "
        f"{e.reference_max_err:.3g} / mean {e.reference_mean_err:.3g}: {_x(e.ratio_max)} / {_x(e.ratio_mean)}{at}"
    )


def leaf_passes(
    expected: np.ndarray,
    actual: np.ndarray,
    tol: Tolerance,
    oracle: np.ndarray | None,
    ref: ReferenceError | None,
    out_dtype: str,
    factor: float = FACTOR,
) -> bool:
    """The rule's yes/no alone (the weak-check guard asks it of trivial outputs)."""
    return judge_leaf(
        0, expected, actual, tol, within(expected, actual, tol), oracle, ref, out_dtype, factor
    ).ok


def _passes_rule(e: LeafError) -> bool:
    a_max, a_mean, a_bias = allowances(e)
    return (
        e.kernel_max_err <= a_max.value
        and e.kernel_mean_err <= a_mean.value
        and (e.kernel_bias or 0.0) <= a_bias.value
    )


def rule_summary(per_seed: list, numerics=None) -> str:
    """One line for every summary (validate, compose, model, auto, search, suite): the rule and the worst
    errors seen as shares of what the rule allowed (the larger of FACTOR x the reference's and the floor),
    from the per-seed errors; empty when nothing was compared. A pass never shows a share over 1: outputs
    that passed by the elementwise tolerance alone are counted apart."""
    errs = [e for r in per_seed for e in getattr(r, "errors", [])]
    if not errs:
        return ""
    rated = [e for e in errs if e.kernel_max_err is not None and e.reference_max_err is not None]
    rules = sorted({e.rule for e in errs})
    if not rated:
        return f"compared by {', '.join(rules)} ({len(errs)} output checks)"
    tolerance_only = [e for e in rated if e.rule == "elementwise" and not _passes_rule(e)]
    judged = [e for e in rated if not (e.rule == "elementwise" and not _passes_rule(e))]
    factor = rated[0].factor
    where = ""
    if numerics is not None and getattr(numerics, "differs_from_host", None):
        where = ", the reference at the target's precision"
    parts = []
    if judged:
        shares = [(allowances(e), e) for e in judged]
        worst_max = max(_share(e.kernel_max_err, a[0].value) for a, e in shares)
        worst_mean = max(_share(e.kernel_mean_err, a[1].value) for a, e in shares)
        floor_max = sum(a[0].by_floor for a, _ in shares)
        floor_mean = sum(a[1].by_floor for a, _ in shares)
        floor = ""
        if floor_max or floor_mean:
            floor = (
                f"; floor of {FLOOR_ULPS:g} ulp of the output dtype applied where larger: max on {floor_max}, "
                f"mean on {floor_mean} of {len(judged)}"
            )
        parts.append(
            f"error vs the upcast oracle, worst over {len(judged)} output checks: {worst_max:.2f} (max) / "
            f"{worst_mean:.2f} (mean) of the error allowed ({factor:g}x the reference's own{where}{floor})"
        )
        failed = [e for e in judged if not e.ok]
        if failed:
            worst_ratio_max = max((e.ratio_max or 0.0) for e in failed)
            worst_ratio_mean = max((e.ratio_mean or 0.0) for e in failed)
            parts.append(
                f"failed on {len(failed)}: at worst {_x(worst_ratio_max)} (max) / {_x(worst_ratio_mean)} (mean) "
                f"the reference's own"
            )
    if tolerance_only:
        parts.append(
            f"{len(tolerance_only)} output checks passed by the elementwise tolerance against the reference at "
            "the target's precision alone (the error rule would not pass them)"
        )
    return f"{'; '.join(parts)}; decided by {', '.join(rules)}"
