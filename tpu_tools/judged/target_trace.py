"""Trace as the target chip (judged side): hardware/chip_trace.py, which a Pallas reference shares."""

from maxkernel.tpu_tools.hardware.chip_trace import target_device, trace_as_target, traced_as

__all__ = ["target_device", "trace_as_target", "traced_as"]
