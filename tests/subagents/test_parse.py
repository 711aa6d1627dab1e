"""Reading typed outputs out of realistic model replies."""

import pytest

from maxkernel.subagents import (
    Diagnosis,
    KernelProposal,
    OutputParseError,
    Plan,
    ProfileAnalysis,
    TestCases,
    TuningSpace,
    extract_json,
    extract_python,
    get_role,
    parse_output,
)

PLAN_REPLY = """Let me work out the arithmetic intensity first.

For M=N=K=4096 in bf16: flops = 2*4096^3 = 1.37e11, bytes = 3*4096^2*2 = 1e8, so ~1365 flop/byte,
above the v6e ridge (561). Compute-bound. A {dict-looking} aside in prose should not confuse the parser.

```json
{
  "strategy": "3-D grid over (m, n, k) tiles, f32 VMEM accumulator, k innermost",
  "block_sizes": {"block_m": 512, "block_n": 512, "block_k": 1024},
  "grid_order": ["m", "n", "k"],
  "dimension_semantics": ["parallel", "parallel", "arbitrary"],
  "accumulator_dtype": "float32",
  "expected_bound": "compute",
  "vmem_bytes_estimate": 6291456,
  "risks": ["K not divisible by 1024 at small size"],
  "rationale": "256x256 MXU: tiles are multiples of 256",
  "confidence": "high",
}
```

Let me know if you want a different tiling."""

KERNEL_V1 = "def workload(x):\n    return x  # draft\n"
KERNEL_FINAL = """import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2  # [8, 128]


def workload(x):
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""

IMPLEMENT_REPLY = f"""Here is a first draft:

```python
{KERNEL_V1}```

On reflection that does nothing, so here is the real kernel:

```python
{KERNEL_FINAL}```

```json
{{"notes": "single block; fine for small sizes only"}}
```
"""


def test_plan_from_fenced_json_with_prose_and_trailing_comma():
    plan = parse_output("planner", PLAN_REPLY)
    assert isinstance(plan, Plan)
    assert plan.block_sizes == {"block_m": 512, "block_n": 512, "block_k": 1024}
    assert plan.dimension_semantics == ["parallel", "parallel", "arbitrary"]
    assert plan.expected_bound == "compute"


def test_bare_json_object_in_prose():
    reply = (
        'The kernel is clearly HBM-bound. {"bottleneck": "memory", "evidence": ["1.2 TB/s of 1.64 TB/s"], '
        '"next_move": "fuse the bias add"} That is my answer.'
    )
    out = parse_output(ProfileAnalysis, reply)
    assert out.bottleneck == "memory" and out.evidence == ["1.2 TB/s of 1.64 TB/s"]


def test_untagged_fence_holding_json():
    reply = 'Space:\n```\n{"tunables": {"block_m": [128, 256]}, "constraints": ["M % block_m == 0"]}\n```\n'
    out = parse_output(get_role("autotuner"), reply)
    assert isinstance(out, TuningSpace) and out.objective == "median_ms"


def test_last_python_block_wins_and_notes_come_from_json():
    out = parse_output("implementer", IMPLEMENT_REPLY)
    assert isinstance(out, KernelProposal)
    assert out.source == KERNEL_FINAL
    assert out.notes.startswith("single block")


def test_kernel_proposal_without_json_is_fine():
    out = parse_output(KernelProposal, f"Done.\n\n```py\n{KERNEL_FINAL}```\n")
    assert out.source == KERNEL_FINAL and out.notes == ""


def test_python_dict_in_code_is_not_taken_as_the_json():
    reply = (
        '```python\nCONFIG = {"block_m": 1}\ndef workload(x):\n    return x\n```\n'
        "```json\n"
        '{"cause": "index map returned element offsets", "error_class": "out_of_bounds", '
        '"fix_summary": "return block indices"}\n```'
    )
    out = parse_output("debugger", reply)
    assert isinstance(out, Diagnosis)
    assert out.error_class == "out_of_bounds"
    assert out.fixed_source.startswith("CONFIG = ")


def test_source_inside_json_is_accepted():
    reply = '```json\n{"source": "def workload(x):\\n    return x\\n", "notes": "n"}\n```'
    assert parse_output(KernelProposal, reply).source.startswith("def workload")


def test_reply_cut_off_inside_the_code_block():
    reply = "```python\nimport jax\n\ndef workload(x):\n    return x\n"
    assert extract_python(reply).endswith("return x\n")


def test_untagged_python_block_is_found():
    assert "def workload" in extract_python("```\nimport jax\ndef workload(x):\n    return x\n```")


def test_test_cases():
    reply = """```json
{"cases": [
  {"name": "ragged_m", "sizes": {"M": 200}, "why": "M not a multiple of block_m"},
  {"name": "large_values", "distribution": "large_magnitude", "scale": 1e4},
  {"name": "bf16", "sizes": {"dtype": "bfloat16"}}
]}
```"""
    out = parse_output(TestCases, reply)
    assert [c.name for c in out.cases] == ["ragged_m", "large_values", "bf16"]
    assert out.cases[0].sizes == {"M": 200} and out.cases[1].scale == 1e4


@pytest.mark.parametrize(
    "reply",
    ["I could not finish this one, sorry.", "", "```json\n{not json at all\n```", "[1, 2, 3]"],
)
def test_garbage_raises_output_parse_error(reply):
    with pytest.raises(OutputParseError) as err:
        parse_output("planner", reply)
    assert "Plan" in str(err.value) and err.value.missing == ["json"]


def test_invalid_json_block_says_so():
    with pytest.raises(OutputParseError, match="not a valid JSON object"):
        extract_json('```json\n{"a": 1\n```')


def test_missing_fields_are_named():
    with pytest.raises(OutputParseError) as err:
        parse_output("profile_analyst", '```json\n{"bottleneck": "memory"}\n```')
    assert set(err.value.missing) == {"evidence", "next_move"}
    assert "missing field `evidence`" in str(err.value)


def test_bad_enum_value_is_explained():
    reply = '```json\n{"bottleneck": "disk", "evidence": [], "next_move": "x"}\n```'
    with pytest.raises(OutputParseError, match="bottleneck"):
        parse_output(ProfileAnalysis, reply)


def test_kernel_without_code_block_says_what_is_missing():
    with pytest.raises(OutputParseError) as err:
        parse_output("implementer", '```json\n{"notes": "forgot the code"}\n```')
    assert err.value.missing == ["source"] and "```python" in str(err.value)


def test_source_without_workload_is_rejected():
    with pytest.raises(OutputParseError, match="workload"):
        parse_output(KernelProposal, "```python\ndef kernel(x):\n    return x\n```")


def test_diagnosis_without_json_names_json():
    with pytest.raises(OutputParseError) as err:
        parse_output(Diagnosis, "```python\ndef workload(x):\n    return x\n```")
    assert err.value.missing == ["json"]
