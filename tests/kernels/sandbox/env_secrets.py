"""Adversary: look for secrets in its environment and in every /proc/<pid>/environ it can read.

Raises every variable whose name looks like a secret, and every readable environ that mentions MARK."""

import json
import os

MARK = "sandbox-secret"
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSW", "PROXY")


def workload(x):
    found = {k: v for k, v in os.environ.items() if any(w in k.upper() for w in SECRET_WORDS)}
    procs = [p for p in os.listdir("/proc") if p.isdigit()]
    for pid in procs:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        if MARK in text:
            found[f"/proc/{pid}/environ"] = text[:2000]
    found["visible_pids"] = procs
    raise RuntimeError("SANDBOX-REPORT " + json.dumps(found))
