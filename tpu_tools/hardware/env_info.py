"""Versions and device of the process that produced a verdict (part of every verdict's evidence)."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from importlib import metadata
from typing import TypeVar

from maxkernel.tpu_tools.reports import Environment, Failure

R = TypeVar("R")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment() -> Environment:
    import jax

    device = jax.devices()[0]
    return Environment(
        jax=jax.__version__,
        jaxlib=_version("jaxlib") or "?",
        libtpu=_version("libtpu") or _version("libtpu-nightly"),
        platform=device.platform,
        device_kind=device.device_kind,
    )


def host_name() -> str:
    """The machine a verdict comes from: `$MAXKERNEL_HOST` (a fleet host's name), else the hostname."""
    return os.environ.get("MAXKERNEL_HOST") or socket.gethostname()


def host_environment() -> Environment:
    """The versions installed here, for a verdict whose child never reported its own (it crashed)."""
    return Environment(
        jax=_version("jax") or "?",
        jaxlib=_version("jaxlib") or "?",
        libtpu=_version("libtpu") or _version("libtpu-nightly"),
        platform="unknown (the child did not report)",
        device_kind="unknown",
    )


def seal(report: R, started: float, failure: Failure | None = None) -> R:
    """Close a verdict: its failure (if any), ok, wall time and the environment that produced it."""
    report.failure = failure  # type: ignore[attr-defined]
    report.ok = failure is None  # type: ignore[attr-defined]
    report.wall_time_s = round(time.perf_counter() - started, 4)  # type: ignore[attr-defined]
    with contextlib.suppress(Exception):
        report.environment = environment()  # type: ignore[attr-defined]
    return report
