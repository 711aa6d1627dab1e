"""Adversary (52m): sends each running sum to the left neighbour instead of the right one."""

from _ring import reduce_scatter


def workload(partials):
    return reduce_scatter(partials, defect="wrong_neighbour")
