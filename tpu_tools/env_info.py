"""Versions and device of the process that produced a verdict (part of every verdict's evidence)."""

from __future__ import annotations

from importlib import metadata

from maxkernel.tpu_tools.reports import Environment


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
