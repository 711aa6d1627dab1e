"""The field's acceptance rule: a kernel's error against an upcast oracle, measured in units of the reference's.

FlashAttention's tests accept a kernel whose max error against an fp32-upcast oracle is at most twice the
max error of a same-precision implementation against that oracle. Here the same-precision implementation is
the reference as the target computes it (problem/numerics.py), the oracle is the reference's own program with
every float widened and every dot at HIGHEST, and the rule holds for the max and for the mean error, each
with a floor of FLOOR_ULPS of the output dtype (a reference that is exact leaves room for a kernel's own
final rounding, no more). A leaf also passes where the elementwise tolerance against the target-precision
reference holds everywhere; integer leaves are exact (against that reference or the oracle).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from maxkernel.tpu_tools.reports import LeafError, Tolerance

FACTOR = 2.0  # FlashAttention's tests: at most 2x a same-precision implementation's error
FLOOR_ULPS = 0.5  # half an ulp of the output dtype at the oracle's scale: room for one final rounding
# A systematic error (the signed mean) is allowed FACTOR x the reference's own plus BIAS_SHARE of its mean
# absolute error: rounding errors of an honest kernel average out (0.2-0.7% of its mean error on the tests'
# projections and MLP), a scaled or shifted answer inside the noise does not (100%).
BIAS_SHARE = 0.1
RULE = (
    f"each output passes where it is within the elementwise tolerance of the reference as the target computes "
    f"it, or where its max and mean errors against the upcast oracle are each at most {FACTOR:g}x the "
    f"reference's own (+{FLOOR_ULPS:g} ulp of the output dtype), and its signed mean error (a bias) is at most "
    f"{FACTOR:g}x the reference's plus {BIAS_SHARE:g} of the reference's mean error"
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
    ok_max = k_max <= factor * ref.max_err + floor_max
    ok_mean = k_mean <= factor * ref.mean_err + floor_mean
    signed = actual.astype(np.float64) - oracle.astype(np.float64)
    signed = signed[np.isfinite(signed)]
    k_bias = abs(float(signed.mean())) if signed.size else 0.0
    bias_allowed = factor * ref.bias + BIAS_SHARE * ref.mean_err + floor_mean
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


def _ratio(k: float, r: float) -> float | None:
    if r > 0:
        return k / r
    return None if k == 0 else float("inf")


def _x(r: float | None) -> str:
    return "n/a" if r is None else ("inf" if r == float("inf") else f"{r:.2f}x")


def finding(e: LeafError) -> str:
    """One sentence from the numbers: how the kernel's error compares with the reference's."""
    errs = (
        f"error against the oracle max {e.kernel_max_err:.3g} / mean {e.kernel_mean_err:.3g}, the reference's "
        f"(at the target's precision) max {e.reference_max_err:.3g} / mean {e.reference_mean_err:.3g}: "
        f"{_x(e.ratio_max)} / {_x(e.ratio_mean)}"
    )
    if e.rule == "elementwise":
        return f"within the elementwise tolerance of the target-precision reference ({errs})"
    if e.ok:
        return f"passes the error rule (<= {e.factor:g}x the reference's error, max and mean): {errs}"
    mean_bad = e.kernel_mean_err > e.factor * e.reference_mean_err + (e.floor_mean or 0.0)
    max_bad = e.kernel_max_err > e.factor * e.reference_max_err + (e.floor_max or 0.0)
    if mean_bad:
        how = "less accurate than the reference"
    elif not max_bad:
        how = (
            f"biased: within {e.factor:g}x the reference's error, but its signed mean error {e.kernel_bias:.3g} is "
            f"over the {e.bias_allowed:.3g} allowed (the reference's {e.reference_bias:.3g}): a systematic shift, "
            "not rounding"
        )
    else:
        how = (
            "different from the reference at a few elements (as accurate on average, "
            f"but its worst element is {_x(e.ratio_max)} the reference's worst)"
        )
    at = ""
    if e.worst_index is not None:
        at = (
            f"; worst at {e.worst_index}: oracle {e.worst_oracle:.6g}, kernel {e.worst_kernel:.6g}, "
            f"reference {e.worst_reference:.6g}"
        )
    return f"{how}: {errs}, over the {e.factor:g}x allowed{at}"


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


def rule_summary(per_seed: list, numerics=None) -> str:
    """One line for every summary (validate, compose, model, auto, search, suite): the rule and the worst
    ratios seen, from the per-seed errors; empty when nothing was compared."""
    errs = [e for r in per_seed for e in getattr(r, "errors", [])]
    if not errs:
        return ""
    rated = [e for e in errs if e.ratio_max is not None or e.ratio_mean is not None]
    rules = sorted({e.rule for e in errs})
    if not rated:
        return f"compared by {', '.join(rules)} ({len(errs)} output checks)"
    worst_max = max((e.ratio_max for e in rated if e.ratio_max is not None), default=0.0)
    worst_mean = max((e.ratio_mean for e in rated if e.ratio_mean is not None), default=0.0)
    factor = rated[0].factor
    where = ""
    if numerics is not None and getattr(numerics, "differs_from_host", None):
        where = " (the reference at the target's precision)"
    return (
        f"error vs the upcast oracle, worst over {len(errs)} output checks: {worst_max:.2f}x (max) / "
        f"{worst_mean:.2f}x (mean) the reference's own{where}, {factor:g}x allowed; decided by {', '.join(rules)}"
    )
