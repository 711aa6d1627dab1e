"""Adversary: plant a .pth file in every site-packages directory (it would run in every later Python).

The test fills TAG (the file's unique name)."""

import json
import site
import sys

TAG = "maxkernel_sandbox_probe"


def workload(x):
    dirs = {*site.getsitepackages(), *(p for p in sys.path if p.endswith("site-packages"))}
    found = {}
    for d in sorted(dirs):
        path = f"{d}/{TAG}.pth"
        try:
            with open(path, "w") as f:
                f.write("import os; os.environ['MAXKERNEL_PWNED'] = '1'\n")
            found[path] = "wrote"
        except OSError as e:
            found[path] = f"{type(e).__name__}: {e.strerror}"
    raise RuntimeError("SANDBOX-REPORT " + json.dumps(found))
