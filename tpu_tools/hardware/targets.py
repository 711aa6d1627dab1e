"""Evaluation targets: where a kernel is compiled and how it is executed.

`cpu` runs locally with Pallas in TPU interpret mode; `tpu-*` compiles with the real TPU compiler
(on the chip if present, else through libtpu compile-only topology devices) and executes on the
chip if present, else in TPU interpret mode on CPU; `local` is whatever `jax.devices()` holds.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from maxkernel.tpu_tools.hardware.chips import CHIPS, ChipSpec, UnknownChipError, get_chip

TARGET_NAMES = ["cpu", "local", *CHIPS]


class Target(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    kind: Literal["cpu", "local", "tpu"]
    chip: ChipSpec | None = None


class UnknownTargetError(ValueError):
    """The caller named a target we cannot compile for."""


def parse_target(name: str) -> Target:
    key = name.strip().lower()
    if key in ("cpu", "local"):
        return Target(name=key, kind=key)  # type: ignore[arg-type]
    try:
        chip = get_chip(key)
    except UnknownChipError:
        raise UnknownTargetError(
            f"unknown target {name!r}; choose one of: {', '.join(TARGET_NAMES)}"
        ) from None
    return Target(name=chip.name, kind="tpu", chip=chip)


DEFAULT_ESTIMATE_CHIP = "tpu-v6e"


def estimate_chip(target: str) -> str:
    """The chip a target's estimate is for (the default chip for `cpu`)."""
    tgt = parse_target(target)
    return tgt.chip.name if tgt.chip is not None else DEFAULT_ESTIMATE_CHIP
