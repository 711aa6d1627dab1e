import sys


def workload(a, b):
    sys.exit(3)
