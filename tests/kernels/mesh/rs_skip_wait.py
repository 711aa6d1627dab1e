"""Adversary (52m): reads the receive buffer without waiting on its DMA semaphore."""

from _ring import reduce_scatter


def workload(partials):
    return reduce_scatter(partials, defect="skip_wait")
