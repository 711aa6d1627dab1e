"""The port verdict: what path made the port, what changed on the way, and the check against the source."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.reports import SeedResult, Tolerance


class PathTry(BaseModel):
    """One translation path tried, in order, and why it did or did not make the port."""

    path: str = Field(description="'torchax', 'torch.export', 'torch.export+decompositions'")
    ok: bool
    detail: str


class PortChange(BaseModel):
    """Something the port does differently from the source, at the boundary or inside."""

    kind: Literal["layout", "dtype", "mode", "in_place", "constant", "shape"]
    detail: str


class PortCheck(BaseModel):
    """The port against the source, run on CPU on the same inputs and parameters over fresh seeds."""

    ok: bool
    status: Literal["match", "mismatch", "weak_check", "bad_port", "source_error"]
    summary: str
    size: str = Field(description="the port's SIZES entry the check ran at (the source's own shape)")
    seed_offset: int
    per_seed: list[SeedResult] = Field(default_factory=list)
    per_seed_size: list[str] = Field(default_factory=list, description="the SIZES entry each per_seed ran at")
    tolerance: Tolerance | None = None
    worst_op: str | None = Field(
        default=None, description="the first op whose value leaves the tolerance, where it can be found"
    )
    source_params: list[str] = Field(
        default_factory=list, description="the source's parameters and buffers the port takes, in order"
    )


class PortReport(BaseModel):
    """`maxkernel port`: a JAX reference made from (or checked against) a PyTorch or Triton source."""

    ok: bool
    status: Literal["ported", "checked", "refused", "source_error"]
    summary: str
    source: str
    source_sha256: str | None = None
    source_kind: Literal["kernelbench", "module", "triton"] | None = None
    port: str | None = Field(default=None, description="the JAX reference file written or checked")
    port_path: str | None = Field(
        default=None, description="what made the port: a translation path, or 'given' for --check"
    )
    paths_tried: list[PathTry] = Field(default_factory=list)
    changes: list[PortChange] = Field(default_factory=list)
    check: PortCheck | None = None
    source_reference: str | None = Field(
        default=None,
        description="beside the port: its inputs, the PyTorch source's outputs (validate a kernel against the source)",
    )
    source_line: int | None = Field(default=None, description="the source's line, for source_error")
