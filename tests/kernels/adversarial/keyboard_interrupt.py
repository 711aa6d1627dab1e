"""A candidate that raises KeyboardInterrupt while traced: its failure, never maxkernel's."""


def workload(a, b):
    raise KeyboardInterrupt("candidate gave up")
