"""Imported first by the forkserver (its preload list): when it runs as the sandbox's forkserver, make it so.

A no-op anywhere else. In the namespaces tier it builds the process-level view itself (bwrap does that
in its tier); in both it dies with its parent. Each job builds its own view (`sandbox_linux.enter_job`).
"""

from __future__ import annotations

import os

ROLE = os.environ.pop("MAXKERNEL_SANDBOX_ROLE", "")

if ROLE.startswith("forkserver:"):
    from maxkernel.tpu_tools.pool import sandbox_linux

    sandbox_linux.die_with_parent()
    if os.getppid() == 1:  # the server died before we got here
        os._exit(1)
    if ROLE == "forkserver:namespaces":
        sandbox_linux.enter_forkserver_namespaces(map_user=os.getuid() != 0)
