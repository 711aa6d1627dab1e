"""Render each role's prompt from typed inputs.

Templates are packaged markdown with `string.Template` placeholders (`$task_spec`). Every prompt is
grounded in the target chip's numbers, passed in as data (a `ChipSpec`, its dict, or text), so this
room never imports the hardware room.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from string import Template
from typing import Any

from pydantic import BaseModel

from maxkernel.subagents.examples import EXAMPLES_BUDGET_TOKENS, render_examples_section
from maxkernel.subagents.guide import load_guide, relevant_guide
from maxkernel.subagents.outputs import Diagnosis, Plan, source_fields
from maxkernel.subagents.roles import Role, get_role

ChipLike = Mapping[str, Any] | BaseModel | str
MiB = 1 << 20
MAX_ERROR_CHARS = 8000
_REQUIRED_CHIP_KEYS = ("vmem_bytes", "hbm_gbps", "peak_bf16_tflops", "mxu_shape")


def _chip_dict(chip: ChipLike) -> dict[str, Any]:
    if isinstance(chip, BaseModel):
        return chip.model_dump()
    if isinstance(chip, Mapping):
        return dict(chip)
    raise TypeError(f"chip must be a ChipSpec, a dict or text, got {type(chip).__name__}")


def _mxu(shape: Any) -> str:
    if isinstance(shape, int):
        return f"{shape}x{shape}"
    if isinstance(shape, Sequence) and not isinstance(shape, str):
        return "x".join(str(int(s)) for s in shape)
    return str(shape)


# The numerics a kernel is checked at (issue 38): the target's own. A TPU computes an f32 dot at DEFAULT in one
# bf16 pass, so a kernel that does the same is as exact as the reference there; the host CPU computes it in f32.
NUMERICS_TPU = (
    "- Numerics: an f32 dot at DEFAULT precision is one bf16 MXU pass on this chip (XLA: BF16_BF16_F32, f32 "
    "accumulation), at HIGH three bf16 passes (BF16_BF16_F32_X3), at HIGHEST full f32; a kernel is checked "
    "against the reference as the chip computes it."
)
NUMERICS_CPU = (
    "- Numerics: the host CPU computes every f32 dot in f32; a kernel is checked against the reference as "
    "the host CPU computes it."
)
HOST_TARGETS = ("cpu", "local")


# The vector unit's bf16 math (chips.py `bf16_vpu`, read from the compiler's schedule); the offline model
# reads these lines (clients/offline/model.py BF16_VPU_RE).
BF16_VPU_YES = "- Vector unit: bf16 elementwise math is native (two bf16 per lane: twice f32's rate)."
BF16_VPU_NO = (
    "- Vector unit: no bf16 arithmetic: each bf16 elementwise op is widened to f32 and rounded back (1.9-2.4x "
    "the bundles of the same ops in f32, by the compiler's schedule); an epilogue upcast once, computed in f32 and "
    "rounded once is faster and no further from the f32 oracle."
)


def chip_facts(chip: ChipLike) -> str:
    """The chip's numbers as a short block of text; text input is taken as already rendered (a bare target
    name gets the numerics it is checked at). A chip dict with `numerics: cpu` is a design chip for a run
    checked on the host CPU."""
    if isinstance(chip, str):
        text = chip.strip()
        if text in HOST_TARGETS:
            return f"Target: {text} (kernels are designed for a TPU and checked on the host)\n{NUMERICS_CPU}"
        return f"{text}\n{NUMERICS_TPU}" if text.startswith("tpu-") else text
    c = _chip_dict(chip)
    missing = [k for k in _REQUIRED_CHIP_KEYS if c.get(k) is None]
    if missing:
        raise ValueError(
            f"chip facts are missing {missing}: pass a ChipSpec (get_chip('tpu-v6e')) or a full dict"
        )
    vmem = int(c["vmem_bytes"])
    hbm = float(c["hbm_gbps"])
    bf16 = float(c["peak_bf16_tflops"])
    ridge = bf16 * 1e12 / (hbm * 1e9)
    name = c.get("name", "unnamed chip")
    kind = f" ({c['device_kind']})" if c.get("device_kind") else ""
    lines = [
        f"Target chip: {name}{kind}; numbers are per JAX device (one TensorCore program's view).",
        f"- VMEM: {vmem} bytes ({vmem / MiB:g} MiB) physical. The default scoped VMEM limit per kernel is "
        "lower; raise it with pltpu.CompilerParams(vmem_limit_bytes=...) and stay under the physical size.",
        f"- HBM bandwidth: {hbm:g} GB/s",
        f"- Peak bf16 MXU throughput: {bf16:g} TFLOP/s",
    ]
    if c.get("peak_int8_tops"):
        lines.append(f"- Peak int8 throughput: {float(c['peak_int8_tops']):g} TOP/s")
    mxu = f"- MXU: {_mxu(c['mxu_shape'])}"
    if c.get("num_mxus"):
        mxu += f" systolic array, {c['num_mxus']} per TensorCore"
    lines.append(mxu)
    if c.get("tensorcores_per_chip"):
        lines.append(f"- TensorCores per chip: {c['tensorcores_per_chip']}")
    if c.get("smem_bytes"):
        lines.append(f"- SMEM: {int(c['smem_bytes'])} bytes")
    lines.append(
        f"- Ridge point: {ridge:.0f} flop/byte (peak bf16 / HBM bandwidth); below that arithmetic "
        "intensity a kernel is memory-bound."
    )
    if c.get("bf16_vpu") is not None:
        lines.append(BF16_VPU_YES if c["bf16_vpu"] else BF16_VPU_NO)
    lines.append(NUMERICS_CPU if c.get("numerics") == "cpu" else NUMERICS_TPU)
    return "\n".join(lines)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, BaseModel):
        return value.model_dump_json(indent=2)
    return json.dumps(value, indent=2, default=str)


def _clip(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Keep the head and the tail of long error text: the cause is usually at one end."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters elided ...]\n{text[-half:]}"


def _demote_headings(markdown: str, levels: int = 1) -> str:
    """Push markdown headings down a level so an embedded document nests under the prompt's own."""
    out, fence = [], None
    for line in markdown.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            mark = stripped[:3]
            fence = None if fence == mark else (fence or mark)
        elif fence is None and line.startswith("#"):
            line = "#" * levels + line
        out.append(line)
    return "\n".join(out)


def _section(title: str, body: str | None, fence: str = "") -> str:
    if not body:
        return ""
    if fence:
        body = f"```{fence}\n{body.rstrip()}\n```"
    return f"## {title}\n\n{body.strip()}\n"


def _describe_schema(schema: dict, defs: dict, indent: str = "") -> list[str]:
    lines = []
    required = set(schema.get("required", []))
    for name, prop in schema.get("properties", {}).items():
        typ, nested = _type_of(prop, defs)
        need = "required" if name in required else "optional"
        desc = prop.get("description", "")
        lines.append(f"{indent}- `{name}` ({typ}, {need}){': ' + desc if desc else ''}")
        if nested:
            lines.extend(_describe_schema(nested, defs, indent + "    "))
    return lines


def _type_of(prop: dict, defs: dict) -> tuple[str, dict | None]:
    if "$ref" in prop:
        target = defs[prop["$ref"].split("/")[-1]]
        return "object", target
    if "enum" in prop:
        return "one of " + ", ".join(json.dumps(v) for v in prop["enum"]), None
    if "anyOf" in prop:
        kinds = [_type_of(p, defs)[0] for p in prop["anyOf"]]
        return " or ".join(kinds), None
    t = prop.get("type", "any")
    if t == "array":
        inner, nested = _type_of(prop.get("items", {}), defs)
        return f"list of {inner}", nested
    if t == "object" and "additionalProperties" in prop:
        inner, _ = _type_of(prop["additionalProperties"], defs)
        return f"object of name -> {inner}", None
    return t, None


def output_contract(role: Role) -> str:
    """How the reply must be laid out so `parse_output` can read it."""
    schema = role.output.model_json_schema()
    defs = schema.get("$defs", {})
    code_fields = source_fields(role.output)
    json_schema = {
        **schema,
        "properties": {k: v for k, v in schema["properties"].items() if k not in code_fields},
    }
    json_schema["required"] = [r for r in schema.get("required", []) if r not in code_fields]
    fields = "\n".join(_describe_schema(json_schema, defs))
    parts = [
        "## Reply format\n",
        "Think briefly, then end your reply with exactly one ```json block holding one JSON object with "
        f"these fields (a `{role.output.__name__}`):\n",
        fields,
    ]
    if code_fields:
        parts.append(
            f"\nPut the complete Python module in one ```python block before the JSON block; it becomes "
            f"`{code_fields[0]}`. Do not put source code inside the JSON. Only the last ```python block is read."
        )
    return "\n".join(parts) + "\n"


def _render(role_name: str, **values: str) -> str:
    role = get_role(role_name)
    values.setdefault("output_contract", output_contract(role))
    text = Template(role.template).substitute(values)
    # Optional sections left empty must not leave runs of blank lines behind.
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.strip() + "\n"


def render_plan_prompt(
    task_spec: str,
    chip: ChipLike,
    kernel: str | None = None,
    feedback: str | None = None,
    examples: Sequence[Any] | None = None,
) -> str:
    """Planner: choose tiling, grid and VMEM budget for `task_spec` on `chip`.

    `examples`: retrieved example hits (find_examples), shown within EXAMPLES_BUDGET_TOKENS["planner"].
    """
    return _render(
        "planner",
        task_spec=task_spec.strip(),
        chip_facts=chip_facts(chip),
        kernel_section=_section("Current kernel (improve on it)", kernel, "python"),
        feedback_section=_section("Feedback on earlier attempts", feedback),
        guide=_demote_headings(load_guide()),
        examples_section=render_examples_section(examples, EXAMPLES_BUDGET_TOKENS["planner"]),
    )


def render_implement_prompt(
    plan: Plan | Mapping | str,
    task_spec: str,
    chip: ChipLike,
    previous_source: str | None = None,
    feedback: str | None = None,
    examples: Sequence[Any] | None = None,
) -> str:
    """Implementer: write the module that carries out `plan` (`examples` as for the planner)."""
    return _render(
        "implementer",
        task_spec=task_spec.strip(),
        chip_facts=chip_facts(chip),
        plan=_as_text(plan),
        kernel_section=_section("Previous version (start from it)", previous_source, "python"),
        feedback_section=_section("Feedback", feedback),
        guide=_demote_headings(load_guide()),
        examples_section=render_examples_section(examples, EXAMPLES_BUDGET_TOKENS["implementer"]),
    )


def _failed_fix_line(i: int, fix: Diagnosis | Mapping | str) -> str:
    if isinstance(fix, Diagnosis):
        return f"{i}. {fix.fix_summary} (believed cause: {fix.cause}; class: {fix.error_class})"
    if isinstance(fix, Mapping):
        return f"{i}. " + "; ".join(f"{k}: {v}" for k, v in fix.items())
    return f"{i}. {str(fix).strip()}"


def _analysis_text(analysis: BaseModel | Mapping | str | None) -> str | None:
    """The compiler analysis (`maxkernel analyze`) as the short text a model acts on."""
    if analysis is None:
        return None
    if isinstance(analysis, BaseModel):
        analysis = analysis.model_dump(mode="json")
    if isinstance(analysis, Mapping):
        text = str(analysis.get("summary") or "").strip()
        return f"Tier {analysis.get('tier', '?')} ({analysis.get('target', '?')}):\n{text}" if text else None
    return str(analysis).strip() or None


def render_debug_prompt(
    kernel: str,
    error: str,
    failed_fixes: Sequence[Diagnosis | Mapping | str] = (),
    chip: ChipLike | None = None,
    task_spec: str | None = None,
    examples: Sequence[Any] | None = None,
    analysis: BaseModel | Mapping | str | None = None,
) -> str:
    """Debugger: explain the failure of `kernel` and return a fixed module, not repeating failed fixes.

    `examples`: hits retrieved by the error text; guide sections already shown are not repeated.
    """
    if chip is None:
        raise ValueError("render_debug_prompt needs the target chip's facts (chip=...)")
    history = "\n".join(_failed_fix_line(i, f) for i, f in enumerate(failed_fixes, 1))
    if history:
        history = "These fixes were already tried and failed. Do not repeat them:\n\n" + history
    guide = relevant_guide(error)
    shown = [line[3:].strip() for line in guide.splitlines() if line.startswith("## ")]
    return _render(
        "debugger",
        task_spec=_section("Task", task_spec),
        chip_facts=chip_facts(chip),
        kernel=kernel.rstrip(),
        error=_clip(error.strip()),
        analysis_section=_section(
            "Compiler analysis (libtpu's final schedule)", _analysis_text(analysis), "text"
        ),
        history_section=_section("Previously failed fixes", history),
        guide=_demote_headings(guide),
        examples_section=render_examples_section(
            examples, EXAMPLES_BUDGET_TOKENS["debugger"], skip_guide_titles=shown
        ),
    )


def render_test_prompt(task_spec: str, chip: ChipLike, kernel: str | None = None) -> str:
    """Tester: propose edge-case inputs the candidate must agree with the reference on."""
    return _render(
        "tester",
        task_spec=task_spec.strip(),
        chip_facts=chip_facts(chip),
        kernel_section=_section("Candidate under test", kernel, "python"),
    )


def render_analyze_profile_prompt(
    report_json: BaseModel | Mapping | str,
    trace_summary: BaseModel | Mapping | str | None,
    chip: ChipLike,
    kernel: str | None = None,
    analysis: BaseModel | Mapping | str | None = None,
) -> str:
    """Profile analyst: name the bottleneck from a profile report, a trace summary and the compiler's analysis."""
    return _render(
        "profile_analyst",
        chip_facts=chip_facts(chip),
        report=_as_text(report_json),
        trace_section=_section("Trace summary", _as_text(trace_summary) or None, "json"),
        analysis_section=_section(
            "Compiler analysis (libtpu's final schedule)", _analysis_text(analysis), "text"
        ),
        kernel_section=_section("Kernel", kernel, "python"),
    )


def render_autotune_prompt(
    kernel: str, task_spec: str, chip: ChipLike, plan: Plan | Mapping | str | None = None
) -> str:
    """Autotuner: define the search space of `kernel`'s tunables under the chip's limits."""
    return _render(
        "autotuner",
        task_spec=task_spec.strip(),
        chip_facts=chip_facts(chip),
        kernel=kernel.rstrip(),
        plan_section=_section("Plan the kernel follows", _as_text(plan) or None),
    )


RENDERERS = {
    "planner": render_plan_prompt,
    "implementer": render_implement_prompt,
    "debugger": render_debug_prompt,
    "tester": render_test_prompt,
    "profile_analyst": render_analyze_profile_prompt,
    "autotuner": render_autotune_prompt,
}


def render_prompt(role: str, **inputs: Any) -> str:
    """Render `role`'s prompt by name (for the MCP server's prompt endpoints)."""
    return RENDERERS[get_role(role).name](**inputs)
