"""What a tool call needs from a host, in Ray resources.

Compile, estimate and interpret-mode validation run on any host: one CPU slot (`num_cpus=1`), which is
also what bounds a host to as many evaluations as it has CPUs given to Ray. Profiling on a chip needs a
host with that chip kind: Ray's own TPU resource `accelerator_type:TPU-V6E` (Ray adds it on a TPU VM; a
CPU box can claim one with `ray start --resources`). A call asks for the whole resource (1 per host), so a
host runs one chip job at a time, and that job's Ray worker exits after it (`max_calls=1`), freeing the
device for the next: one device owner per host. Node death retries come from Ray (`max_retries`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

ProfileOn = Literal["auto", "chip", "any"]
PROFILE_ON_CHOICES = ("auto", "chip", "any")
RETRIES_ON_NODE_LOSS = 3  # Ray re-runs a call whose worker or node died this many times, elsewhere

# Our chip names -> Ray's TPU accelerator types (ray.util.accelerators: GOOGLE_TPU_V4, ...).
RAY_TPU_TYPES = {
    "tpu-v4": "TPU-V4",
    "tpu-v5e": "TPU-V5LITEPOD",
    "tpu-v5p": "TPU-V5P",
    "tpu-v6e": "TPU-V6E",
    "tpu-7x": "TPU-V7X",
}


class NoHostFor(Exception):
    """No host in the cluster can ever run this call (Ray would leave it pending forever)."""


def chip_resource(chip: str) -> str:
    return f"accelerator_type:{RAY_TPU_TYPES[chip]}"


def profiled_chip(tool: str, args: dict[str, Any]) -> str | None:
    """The chip a call times the kernel on (None: it compiles, estimates or validates only)."""
    if tool == "profile_kernel":
        target = args.get("target")
    elif tool == "evaluate_kernel" and args.get("profile", True):
        target = args.get("profile_target")
    else:
        return None
    return target if target in RAY_TPU_TYPES else None


class Placement(BaseModel):
    """The Ray options of one call, and why (shown when no host fits)."""

    model_config = ConfigDict(frozen=True)

    resources: dict[str, float] = {}
    on_chip: str | None = None

    def options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_cpus": 1, "max_retries": RETRIES_ON_NODE_LOSS, "retry_exceptions": False}
        if self.resources:
            opts["resources"] = dict(self.resources)
        return opts


def place(tool: str, args: dict[str, Any], profile_on: ProfileOn, cluster: dict[str, float]) -> Placement:
    """Where a call may run, given the cluster's total resources. Raises NoHostFor at once when the call
    must profile on a chip kind that no host has."""
    chip = profiled_chip(tool, args)
    if chip is None or profile_on == "any":
        return Placement()
    res = chip_resource(chip)
    if cluster.get(res, 0) >= 1:
        return Placement(resources={res: 1}, on_chip=chip)
    if profile_on == "chip":
        kinds = sorted(k.split(":", 1)[1] for k in cluster if k.startswith("accelerator_type:"))
        have = ", ".join(kinds) if kinds else "none"
        raise NoHostFor(
            f"no host in the Ray cluster has a {chip} chip (Ray resource {res}; chip kinds present: {have}): "
            f"join one, or drop --profile-on chip to estimate off the chip"
        )
    return Placement()  # auto: no such host, so the profile is a labeled estimate on any host
