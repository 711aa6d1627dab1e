"""The honest twin of the 52m adversaries: the same ring, waits and neighbours right."""

from _ring import reduce_scatter


def workload(partials):
    return reduce_scatter(partials)
