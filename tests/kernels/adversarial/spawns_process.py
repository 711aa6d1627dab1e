"""Exploit: start a helper process that outlives the checks (it could rewrite the outputs after the run)."""

import subprocess
import sys

from _pallas import matmul

try:
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
except OSError:
    pass


def workload(a, b):
    return matmul(a, b)
