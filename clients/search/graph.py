"""The search graph's data: candidate kernels (nodes) and what each evaluation said about them.

A node's id is content-addressed: a hash of the canonical JSON of (source hash, parent id) under a
version prefix, so the same kernel derived from the same parent is the same node in every run, and a
resumed search recognises work it already did. Edges are "derived from parent, by this strategy".
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

NODE_ID_VERSION = "mkn1"
Status = Literal["pending", "running", "valid", "invalid", "failed"]
FINISHED: tuple[Status, ...] = ("valid", "invalid", "failed")
TimeLabel = Literal["measured", "estimate"]


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def source_hash(source: str) -> str:
    return sha256_text(source)


def node_id(src_hash: str, parent_id: str | None) -> str:
    """`mkn1-<24 hex>`: hash of canonical JSON of the version, the source hash and the parent id."""
    body = canonical_json({"v": NODE_ID_VERSION, "source": src_hash, "parent": parent_id})
    return f"{NODE_ID_VERSION}-{sha256_text(body)[:24]}"


class NodeVerdict(BaseModel):
    """What one evaluation said: the stage verdicts as JSON, and the time that ranks the node.

    `status` is valid (compiled and matched the reference), invalid (a negative verdict: does not
    compile, wrong numbers) or failed (the evaluation itself broke: server gone, tool error).
    """

    status: Literal["valid", "invalid", "failed"]
    stopped_at: str | None = None
    time_us: float | None = Field(default=None, description="the ranking time; see time_label")
    time_label: TimeLabel | None = Field(
        default=None, description="measured on the chip, or a static estimate"
    )
    compile: dict[str, Any] | None = None
    validation: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None
    failure: str | None = None
    server: str | None = Field(default=None, description="which evaluator produced it")
    tool_versions: str = ""
    duration_s: float = 0.0
    seeds: list[int] | None = None


class Node(BaseModel):
    """One candidate kernel in the graph."""

    id: str
    parent_id: str | None = None
    source_hash: str
    strategy: str | None = Field(default=None, description="the strategy that derived it from its parent")
    second_parent_id: str | None = Field(default=None, description="the other parent of a combination")
    plan: dict[str, Any] | None = None
    config: dict[str, Any] | None = Field(default=None, description="concrete tunables, when known")
    depth: int = 0
    status: Status = "pending"
    verdict: NodeVerdict | None = None
    time_us: float | None = None
    time_label: TimeLabel | None = None
    cost_usd: float = 0.0
    cached: bool = Field(default=False, description="verdict came from the evaluation cache")
    eval_seq: int | None = Field(default=None, description="order in which its evaluation finished")
    attempts: int = 0
    created_at: float = Field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


def make_node(
    source: str,
    parent: Node | None = None,
    *,
    strategy: str | None = None,
    second_parent: Node | None = None,
    plan: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    cost_usd: float = 0.0,
) -> Node:
    h = source_hash(source)
    parent_id = parent.id if parent else None
    return Node(
        id=node_id(h, parent_id),
        parent_id=parent_id,
        source_hash=h,
        strategy=strategy,
        second_parent_id=second_parent.id if second_parent else None,
        plan=plan,
        config=config,
        depth=(parent.depth + 1) if parent else 0,
        cost_usd=cost_usd,
    )
