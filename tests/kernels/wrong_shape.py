from _matmul_base import tiled_matmul


def workload(a, b):
    return tiled_matmul(a, b)[:128]
