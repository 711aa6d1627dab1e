"""The jaxpr facts both counters share: element counts, matmul/conv flops, transcendental primitives,
and the sub-jaxprs of an equation (jaxpr_cost.py counts a program, branches.py a kernel's branches)."""

from __future__ import annotations

import math
from typing import Any

TRANSCENDENTAL = {"exp", "exp2", "log", "log1p", "tanh", "logistic", "sin", "cos", "tan", "rsqrt", "sqrt",
                  "erf", "erf_inv", "pow", "atan2", "cbrt", "expm1", "erfc", "lgamma", "digamma"}  # fmt: skip


def _size(aval: Any) -> int:
    shape = getattr(aval, "shape", ())
    return int(math.prod(shape)) if shape is not None else 1


def _nbytes(aval: Any) -> int:
    dt = getattr(aval, "dtype", None)
    try:
        return _size(aval) * int(dt.itemsize)
    except Exception:
        return 0


def _dot_flops(eqn) -> float:
    (lc, rc), (lb, _rb) = eqn.params["dimension_numbers"]
    lhs, rhs = (v.aval for v in eqn.invars[:2])
    contract = math.prod(lhs.shape[d] for d in lc)
    batch = math.prod(lhs.shape[d] for d in lb)
    lfree = math.prod(s for i, s in enumerate(lhs.shape) if i not in lc and i not in lb)
    rfree = _size(rhs) // max(1, contract * batch)
    return 2.0 * batch * lfree * rfree * contract


def _conv_flops(eqn) -> float:
    out = eqn.outvars[0].aval
    rhs = eqn.invars[1].aval
    groups = eqn.params.get("feature_group_count", 1) or 1
    dn = eqn.params.get("dimension_numbers")
    out_ch_dim = getattr(dn, "rhs_spec", (0,))[0] if dn is not None else 0
    per_out = _size(rhs) // max(1, rhs.shape[out_ch_dim])
    return 2.0 * _size(out) * per_out / max(1, groups) * groups


def _subjaxprs(eqn):
    from jax._src import core as jcore

    return list(jcore.jaxprs_in_params(eqn.params))
