"""Honest: the same row-blocked RMSNorm the adversaries wrap, with no trick (must pass)."""

from _rms_rows import rms_norm


def workload(x, scale):
    return rms_norm(x, scale)
