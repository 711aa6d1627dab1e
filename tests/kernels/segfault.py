import os
import signal


def workload(a, b):
    os.kill(os.getpid(), signal.SIGSEGV)
