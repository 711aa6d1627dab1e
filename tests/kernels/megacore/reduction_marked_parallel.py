"""Adversary: the reduction axis is marked "parallel"; on a megacore chip both cores write one block."""

from _column_sum import column_sum


def workload(x):
    return column_sum(x, "parallel")
