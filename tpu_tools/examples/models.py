"""The example index's result shapes (pydantic): one entry, one hit with its excerpt, one search.

The MCP tool's output, the CLI's --json and the prompts all use these. Token counts are estimates:
ceil(characters / 4).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

Source = Literal["jax", "jaxbench", "guide", "user"]


def tokens(text: str) -> int:
    """Estimated tokens: ceil(characters / 4)."""
    return math.ceil(len(text) / 4)


class ExampleError(Exception):
    """The caller asked for something the index cannot give (unknown id, unreadable folder)."""


class ExampleEntry(BaseModel):
    """One kernel function with its pallas_call (or one guide section), as indexed."""

    id: str = Field(description="stable id; the resource is maxkernel://examples/{id}")
    kind: Literal["kernel", "guide"]
    source: Source
    version: str = Field(description="jax version, or our package version + file sha for our files")
    path: str = Field(description="file the entry was read from")
    where: str = Field("", description="the path shown: from the package root for jax and our files")
    line: int = 0
    name: str = Field(description="kernel function (or guide section title)")
    wrapper: str = Field("", description="the function that calls pallas_call")
    task: str | None = Field(None, description="the JaxBench task this reference belongs to")
    what: list[str] = Field(default_factory=list, description="matmul, attention, reduction, scan, ...")
    primitives: list[str] = Field(default_factory=list, description="pl/pltpu/jnp/lax calls in the kernel")
    pattern: str = Field("", description="grid / BlockSpec / memory-space summary of the launch")
    features: list[str] = Field(default_factory=list, description="scalar_prefetch, manual_dma, ...")
    doc: str = ""
    kernel_source: str = ""
    call_source: str = ""
    helper_source: str = ""
    wrapper_source: str = ""

    @property
    def uri(self) -> str:
        return f"maxkernel://examples/{self.id}"

    def full_text(self) -> str:
        """Everything stored, for the resource: header, kernel, helpers, the launching function."""
        parts = [self.header(), self.doc and f'"""{self.doc}"""']
        if self.kind == "guide":
            parts.append(self.kernel_source)
        else:
            parts += [self.kernel_source, self.helper_source, self.wrapper_source or self.call_source]
        return "\n\n".join(p for p in parts if p).rstrip() + "\n"

    def header(self) -> str:
        shown = self.where or self.path
        where = f"{shown}:{self.line}" if self.line else shown
        lines = [f"# {self.id}  ({self.source} {self.version}; {where})"]
        if self.kind == "kernel":
            lines.append(f"# what: {', '.join(self.what)}; launched by {self.wrapper}")
            if self.pattern:
                lines.append(f"# launch: {self.pattern}")
            if self.primitives:
                lines.append(f"# primitives: {', '.join(self.primitives[:24])}")
        return "\n".join(lines)


class ExampleHit(BaseModel):
    """A search result with an excerpt cut to its share of the budget."""

    id: str
    uri: str
    kind: Literal["kernel", "guide"]
    source: Source
    version: str
    path: str
    where: str
    name: str
    what: list[str]
    pattern: str
    features: list[str]
    score: float = Field(description="bm25 relevance after feature boosts; higher is better")
    excerpt: str
    excerpt_tokens: int = Field(description="estimated tokens (characters / 4) of `excerpt`")
    truncated: bool = Field(description="the excerpt is shorter than the entry; read the uri for all of it")


class ExampleSearch(BaseModel):
    """The top-k examples for one query, within `budget_tokens`."""

    mode: str = Field(description="text, operator, primitives, task or error: what drove the search")
    words: list[str] = Field(description="the words searched (bm25 over FTS5)")
    features: list[str] = Field(description="entry features preferred (from the error families)")
    error_families: list[str] = Field(default_factory=list)
    budget_tokens: int
    used_tokens: int
    token_rule: str = "estimated tokens = ceil(characters / 4)"
    hits: list[ExampleHit]
    index: IndexInfo


class IndexInfo(BaseModel):
    path: str
    jax_version: str
    entries: int
    by_source: dict[str, int]
    user_dirs: list[str]


ExampleSearch.model_rebuild()
