"""The role registry: outputs, tools, prompts and lookups."""

import pytest
from pydantic import BaseModel

from maxkernel.subagents import ROLES, TOOL_NAMES, TuningSpace, UnknownRoleError, get_role

EXPECTED = {"planner", "implementer", "debugger", "tester", "profile_analyst", "autotuner"}


def test_registry_has_the_six_roles():
    assert set(ROLES) == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_role_is_complete(name):
    role = get_role(name)
    assert issubclass(role.output, BaseModel)
    assert role.tools and set(role.tools) <= set(TOOL_NAMES)
    assert len(role.system_prompt) > 200
    assert "$output_contract" in role.template and "$chip_facts" in role.template
    assert role.output_schema()["title"] == role.output.__name__


def test_guide_roles():
    assert {r.name for r in ROLES.values() if r.uses_guide} == {"planner", "implementer", "debugger"}


def test_tools_named_in_the_brief():
    assert {"get_task", "list_chips"} <= set(get_role("planner").tools)
    assert "compile_kernel" in get_role("implementer").tools
    assert "validate_kernel" in get_role("tester").tools
    assert "autotune_kernel" in get_role("autotuner").tools


def test_lookup_aliases_and_unknown():
    assert get_role("Profile-Analyst").name == "profile_analyst"
    assert get_role(" PLANNER ").name == "planner"
    with pytest.raises(UnknownRoleError, match="known: planner"):
        get_role("reviewer")


def test_roles_are_frozen():
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError for frozen models
        get_role("planner").tools = ()


def test_tuning_space_size_and_validation():
    space = TuningSpace(tunables={"block_m": [128, 256], "block_k": [256, 512, 1024]})
    assert space.size == 6
    with pytest.raises(ValueError, match="no candidate values"):
        TuningSpace(tunables={"block_m": []})
