"""Adversary: write into the real home directory, a host temp dir, /tmp and the workspace.

The test fills TAG (a unique file name), HOST_DIR (a directory outside the job's scratch) and
WORKSPACE (the directory this kernel came from)."""

import json
import os
import pwd

TAG = "maxkernel-sandbox-probe"
HOST_DIR = "/nonexistent"
WORKSPACE = ""


def workload(x):
    home = pwd.getpwuid(os.getuid()).pw_dir  # the real one, not $HOME
    targets = {
        "home": os.path.join(home, TAG),
        "host_dir": os.path.join(HOST_DIR, TAG),
        "tmp": os.path.join("/tmp", TAG),
        "workspace": os.path.join(WORKSPACE or os.path.dirname(os.path.abspath(__file__)), TAG),
    }
    found = {}
    for name, path in targets.items():
        try:
            with open(path, "w") as f:
                f.write("written by a kernel")
            found[name] = "wrote"
        except OSError as e:
            found[name] = f"{type(e).__name__}: {e.strerror}"
    raise RuntimeError("SANDBOX-REPORT " + json.dumps(found))
