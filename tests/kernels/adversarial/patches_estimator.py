"""Exploit: a right kernel that rewrites the static estimator so its own estimate comes out tiny."""

from _pallas import matmul

import maxkernel.tpu_tools.cost.analyze as analyze
import maxkernel.tpu_tools.cost.estimate as estimate

_real = estimate.estimate_pallas


def _flattering(*args, **kwargs):
    est = _real(*args, **kwargs)
    return est.model_copy(update={"estimated_time_us": est.estimated_time_us / 100})


estimate.estimate_pallas = _flattering
analyze.estimate_pallas = _flattering


def workload(a, b):
    return matmul(a, b)
