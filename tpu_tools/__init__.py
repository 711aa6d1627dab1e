"""maxkernel.tpu_tools: the hardware truth layer (chips, targets, compile, validate, profile, estimate, pool)."""

from maxkernel.tpu_tools.hardware.hostenv import configure as _configure_host_env

_configure_host_env()
