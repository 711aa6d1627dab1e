"""maxkernel.subagents: the roles a model plays while writing TPU kernels.

Prompt templates, typed outputs and the Pallas-on-TPU guide, shared by the MCP server's prompts and
the orchestrator's loops. A leaf room: no I/O beyond reading its own packaged text files, and no
imports of other maxkernel rooms (chip facts come in as data).
"""

from maxkernel.subagents.examples import (
    EXAMPLES_BUDGET_TOKENS,
    MAX_EXAMPLES,
    MIN_SCORE_RATIO,
    render_examples_section,
    retrieval_budget,
)
from maxkernel.subagents.guide import guide_sections, load_guide, relevant_guide
from maxkernel.subagents.outputs import (
    Diagnosis,
    KernelProposal,
    Plan,
    ProfileAnalysis,
    TestCase,
    TestCases,
    TuningSpace,
)
from maxkernel.subagents.parse import OutputParseError, extract_json, extract_python, parse_output
from maxkernel.subagents.render import (
    chip_facts,
    output_contract,
    render_analyze_profile_prompt,
    render_autotune_prompt,
    render_debug_prompt,
    render_implement_prompt,
    render_plan_prompt,
    render_prompt,
    render_test_prompt,
)
from maxkernel.subagents.roles import ROLES, TOOL_NAMES, Role, UnknownRoleError, get_role

__all__ = [
    "ROLES",
    "TOOL_NAMES",
    "Diagnosis",
    "KernelProposal",
    "OutputParseError",
    "Plan",
    "ProfileAnalysis",
    "Role",
    "TestCase",
    "TestCases",
    "TuningSpace",
    "UnknownRoleError",
    "chip_facts",
    "extract_json",
    "extract_python",
    "get_role",
    "EXAMPLES_BUDGET_TOKENS",
    "MAX_EXAMPLES",
    "MIN_SCORE_RATIO",
    "guide_sections",
    "render_examples_section",
    "retrieval_budget",
    "load_guide",
    "output_contract",
    "parse_output",
    "relevant_guide",
    "render_analyze_profile_prompt",
    "render_autotune_prompt",
    "render_debug_prompt",
    "render_implement_prompt",
    "render_plan_prompt",
    "render_prompt",
    "render_test_prompt",
]
