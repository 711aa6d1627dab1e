"""The subagent roles: one registry shared by the MCP server's prompts and the orchestrator's loops.

A role is data: which prompt template it renders, which system prompt it runs under, which typed
output its reply must parse into, and which MCP tools it may call.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from maxkernel.subagents.outputs import (
    Diagnosis,
    KernelProposal,
    Plan,
    ProfileAnalysis,
    TestCases,
    TuningSpace,
)

# The MCP tool names roles may be granted. The server test keeps this list equal to its tools.
TOOL_NAMES: tuple[str, ...] = (
    "get_task",
    "describe_reference",
    "list_tasks",
    "list_chips",
    "compile_kernel",
    "validate_kernel",
    "profile_kernel",
    "evaluate_kernel",
    "estimate_kernel",
    "analyze_kernel",
    "summarize_trace",
    "autotune_kernel",
    "find_examples",
    "find_hotspots",
    "extract_region",
    "compose_kernels",
    "port_source",
)


class UnknownRoleError(ValueError):
    """The caller named a role that does not exist."""


@cache
def read_packaged_text(*parts: str) -> str:
    """Read one of this package's text files (prompts, guides); the room's only I/O."""
    return resources.files("maxkernel.subagents").joinpath(*parts).read_text(encoding="utf-8")


class Role(BaseModel):
    """One subagent: its prompts, its output type, its tools."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str = Field(description="registry key, e.g. 'planner'")
    description: str
    output: type[BaseModel] = Field(description="the pydantic model the reply must parse into")
    tools: tuple[str, ...] = Field(description="MCP tool names this role may call")
    template_file: str = Field(description="user-prompt template under subagents/prompts/")
    system_file: str = Field(description="system prompt under subagents/prompts/")
    uses_guide: bool = Field(default=False, description="whether its prompt embeds the Pallas guide")

    @property
    def system_prompt(self) -> str:
        return read_packaged_text("prompts", self.system_file).strip()

    @property
    def template(self) -> str:
        return read_packaged_text("prompts", self.template_file)

    def output_schema(self) -> dict:
        return self.output.model_json_schema()


def _role(name: str, description: str, output: type[BaseModel], tools: tuple[str, ...], guide=False) -> Role:
    unknown = set(tools) - set(TOOL_NAMES)
    assert not unknown, f"role {name} names unknown tools {unknown}"
    return Role(
        name=name,
        description=description,
        output=output,
        tools=tools,
        template_file=f"{name}.md",
        system_file=f"{name}.system.md",
        uses_guide=guide,
    )


ROLES: dict[str, Role] = {
    r.name: r
    for r in [
        _role(
            "planner",
            "Chooses the tiling, grid, VMEM budget and accumulator for a kernel on a chip.",
            Plan,
            ("get_task", "list_chips", "estimate_kernel", "find_examples"),
            guide=True,
        ),
        _role(
            "implementer",
            "Writes the Pallas module that carries out a plan.",
            KernelProposal,
            ("get_task", "compile_kernel", "find_examples"),
            guide=True,
        ),
        _role(
            "debugger",
            "Reads a failing kernel and its verdict, names the cause, returns the fixed module.",
            Diagnosis,
            ("compile_kernel", "validate_kernel", "find_examples", "analyze_kernel"),
            guide=True,
        ),
        _role(
            "tester",
            "Proposes edge-case inputs the candidate and the reference must agree on.",
            TestCases,
            ("get_task", "validate_kernel"),
        ),
        _role(
            "profile_analyst",
            "Reads a profile and an estimate, names the bottleneck and the next move.",
            ProfileAnalysis,
            ("profile_kernel", "estimate_kernel", "analyze_kernel", "summarize_trace"),
        ),
        _role(
            "autotuner",
            "Defines the search space of a kernel's tunables under the chip's limits.",
            TuningSpace,
            ("autotune_kernel", "compile_kernel", "estimate_kernel"),
        ),
    ]
}

_ALIASES = {"profile-analyst": "profile_analyst", "analyst": "profile_analyst", "profiler": "profile_analyst"}


def get_role(name: str) -> Role:
    key = name.strip().lower()
    key = _ALIASES.get(key, key.replace("-", "_"))
    if key not in ROLES:
        raise UnknownRoleError(f"unknown role {name!r}; known: {', '.join(ROLES)}")
    return ROLES[key]
