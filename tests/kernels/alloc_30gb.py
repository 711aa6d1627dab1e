import numpy as np


def workload(a, b):
    big = np.ones((30 * 1024**3,), dtype=np.uint8)
    return big
