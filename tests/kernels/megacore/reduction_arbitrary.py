"""The honest twin: the reduction axis is "arbitrary", so no core split touches it."""

from _column_sum import column_sum


def workload(x):
    return column_sum(x, "arbitrary")
