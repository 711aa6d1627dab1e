"""What an evaluation child may see of its parent: a neutral argv and a minimal environment.

The CLI's and the server's argv name the reference and its flags, and their environment may hold API
keys and tokens; a job function calls `scrub()` first, before any user code (candidate or reference)
runs. The OS sandbox goes further (a fresh environ block, no /proc of the parent); this is the part a
process can do for itself.
"""

from __future__ import annotations

import os
import sys

_KEEP_PREFIXES = (
    "JAX_",
    "XLA_",
    "PJRT_",
    "TPU_",
    "LIBTPU",
    "ALLOW_MULTIPLE_LIBTPU_LOAD",
    "LC_",
    "MAXKERNEL_MEMORY",
)
_KEEP = ("PATH", "LANG", "TMPDIR", "HOME")
ARGV = ["maxkernel-job"]


def minimal_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The subset of `env` (default os.environ) a job needs: jax/XLA/PJRT/libtpu settings, PATH, locale."""
    env = dict(os.environ if env is None else env)
    return {k: v for k, v in env.items() if k in _KEEP or k.startswith(_KEEP_PREFIXES)}


def scrub() -> None:
    """Replace argv and drop every environment variable a job does not need (in place)."""
    sys.argv[:] = ARGV
    keep = minimal_env()
    for key in list(os.environ):
        if key not in keep:
            del os.environ[key]
