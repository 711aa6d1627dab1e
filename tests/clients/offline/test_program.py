"""The offline model works from what a reference is (its traced program), not from a task id."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest_paths import TESTS

from maxkernel.clients.models.base import Message
from maxkernel.clients.offline.classify import classify
from maxkernel.clients.offline.model import NoTemplateFits, OfflineModel
from maxkernel.clients.offline.program_text import find_program, program_section
from maxkernel.clients.offline.rows import analyse
from maxkernel.subagents.parse import parse_output
from maxkernel.subagents.render import render_implement_prompt, render_plan_prompt
from maxkernel.subagents.roles import get_role
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.problem.program import describe

ROOT = TESTS.parent
CHIP = {**get_chip("tpu-v6e").model_dump(), "numerics": "cpu"}  # the Auto loop's design chip for --target cpu
HEADER = """
import jax
import jax.numpy as jnp

SIZES = {"full": {"n": 1}, "small": {"n": 1}}


def create_inputs(dtype=None, *, key=None, size="full"):
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    ks = jax.random.split(key, 4)
    return tuple(jax.random.normal(k, s, jnp.float32) for k, s in zip(ks, SHAPES))
"""
REFS = {
    "elementwise": ("SHAPES = [(64, 256)]", "def workload(x):\n    return jax.nn.gelu(x) * 2.0 - x"),
    "rowwise": ("SHAPES = [(64, 256)]", "def workload(x):\n    return jax.nn.softmax(x, axis=-1)"),
    "matmul": (
        "SHAPES = [(64, 128), (128, 256), (256,)]",
        "def workload(x, w, b):\n    return jax.nn.gelu(x @ w + b)",
    ),
    "attention": (
        "SHAPES = [(2, 64, 32), (2, 64, 32), (2, 64, 32)]",
        "def workload(q, k, v):\n    s = jnp.einsum('bqd,bkd->bqk', q, k)\n"
        "    return jnp.einsum('bqk,bkd->bqd', jax.nn.softmax(s, axis=-1), v)",
    ),
    "fused": (
        "SHAPES = [(64, 256)]",
        "def workload(x):\n    return x - jnp.mean(x, axis=0, keepdims=True)",  # a reduction over rows
    ),
    "none": ("SHAPES = [(64, 256)]", "def workload(x):\n    return jnp.sort(x, axis=-1)"),
}


def write_ref(tmp_path: Path, name: str, shapes: str, body: str) -> Path:
    path = tmp_path / f"{name}_ref.py"
    path.write_text(HEADER + "\n" + shapes + "\n\n\n" + body + "\n")
    return path


def ask(model: OfflineModel, role: str, prompt: str) -> str:
    messages = [Message.system(get_role(role).system_prompt), Message.user(prompt)]
    return asyncio.run(model.request(messages)).text


def first_kernel(reference: Path | str) -> str:
    """What the offline planner + implementer write for `reference`, given only its traced program."""
    spec = "Reference module (the kernel must match it).\n\n" + program_section(
        describe(str(reference)).model_dump(mode="json")
    )
    model = OfflineModel()
    plan = parse_output("planner", ask(model, "planner", render_plan_prompt(spec, CHIP)))
    reply = ask(model, "implementer", render_implement_prompt(plan, spec, CHIP))
    return parse_output("implementer", reply).source


@pytest.mark.parametrize("kind", list(REFS))
def test_each_program_class_is_recognised_from_the_trace(kind, tmp_path):
    program = describe(str(write_ref(tmp_path, kind, *REFS[kind]))).model_dump(mode="json")
    found = classify(program)
    assert found.kind == kind, found
    assert (found.unsupported == ["sort"]) == (kind == "none")


def test_rows_follow_the_activation_not_a_weight_whose_size_matches(tmp_path):
    ref = write_ref(
        tmp_path, "square", "SHAPES = [(128, 128), (128, 256)]", "def workload(a, b):\n    return a @ b"
    )
    plan = analyse(describe(str(ref)).model_dump(mode="json"))
    assert plan.tiled and plan.input_axes == [0, None]  # b's leading 128 is K, contracted: passed whole
    norm = write_ref(tmp_path, "norm", *REFS["fused"])
    plan = analyse(describe(str(norm)).model_dump(mode="json"))
    assert not plan.tiled and "reduces over rows" in plan.why


def test_rows_follow_the_activation_not_a_bias_as_long_as_the_rows(tmp_path):
    # [M, K] @ [K, N] + bias[N] reshaped to (1, N), with N == M: the bias was guessed a row input, its
    # axis met the activation's on different axes, and the activation (not the guess) was dropped: untiled
    body = "def workload(x, w, b):\n    return x @ w + b.reshape(1, -1)"
    ref = write_ref(tmp_path, "square_bias", "SHAPES = [(256, 128), (128, 256), (256,)]", body)
    plan = analyse(describe(str(ref)).model_dump(mode="json"))
    assert plan.tiled and plan.input_axes == [0, None, None], plan.why


def test_the_program_survives_the_prompt_round_trip(tmp_path):
    program = describe(str(write_ref(tmp_path, "mm", *REFS["matmul"]))).model_dump(mode="json")
    text = f"Task.\n\n{program_section(program)}\n\n## Chip\nv6e"
    assert find_program(text) == program
    assert find_program("no program here") is None


def test_no_template_fits_names_the_ops(tmp_path):
    spec = program_section(describe(str(write_ref(tmp_path, "s", *REFS["none"]))).model_dump(mode="json"))
    # a bare sort: nothing but the op no kernel body lowers, so no stage is left for a kernel beside XLA's
    with pytest.raises(
        NoTemplateFits,
        match=r"no template fits this reference \(ops: sort; with them left to XLA: no stage is left",
    ):
        ask(OfflineModel(), "planner", render_plan_prompt(spec, CHIP))


def test_kernels_do_their_work_inside_the_pallas_call(tmp_path):
    """The adversary's shortcut (the matmul or the reduction outside the kernel) is not what it writes."""
    import jax

    from maxkernel.tpu_tools.judged.candidate import load_candidate
    from maxkernel.tpu_tools.problem.reference import load_reference

    ref_path = write_ref(tmp_path, "mm", *REFS["matmul"])
    kernel = tmp_path / "kernel.py"
    kernel.write_text(first_kernel(ref_path))
    shapes = load_reference(str(ref_path)).input_shapes("small")
    top = jax.make_jaxpr(load_candidate(str(kernel)).workload)(*shapes).jaxpr.eqns
    assert [e.primitive.name for e in top] == ["pallas_call"]


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=1) as pool:
        yield Evaluator(pool, timeout_s=240)


@pytest.mark.slow
@pytest.mark.parametrize(
    "reference",
    [
        "examples/softmax_reference.py",
        "examples/layernorm_reference.py",
        "examples/matmul_bias_gelu_reference.py",
    ],
)
def test_own_references_validate(reference, evaluator, tmp_path):
    kernel = tmp_path / "kernel.py"
    kernel.write_text(first_kernel(ROOT / reference))
    report = evaluator.validate(str(kernel), str(ROOT / reference), "cpu", "small", seeds=2)
    assert report.ok, report.failure


def test_an_epilogue_no_table_knows_validates(tmp_path, evaluator):
    """Numerics come from the reference's structure: an odd epilogue (where, sin, cumsum) on a k-tiled
    matmul still matches."""
    body = (
        "def workload(x, w):\n    y = x @ w\n"
        "    return jnp.cumsum(jnp.where(y > 0.3, jnp.sin(y), y * 0.5), axis=-1)"
    )
    ref = write_ref(tmp_path, "odd", "SHAPES = [(64, 8192), (8192, 256)]", body)
    kernel = tmp_path / "kernel.py"
    kernel.write_text(first_kernel(ref))
    text = kernel.read_text()
    assert "lax.cumsum" in text and "lax.sin" in text
    block_k = int(re.search(r"^BLOCK_K = (\d+)$", text, re.M).group(1))
    assert "template=matmul" in text and 8192 // block_k >= 2  # k-steps into the f32 accumulator
    report = evaluator.validate(str(kernel), str(ref), "cpu", "small", seeds=1)
    assert report.ok, report.failure


def _orchestrate(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "maxkernel-orchestrate"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.mark.slow
def test_no_template_fits_is_one_line_and_a_clean_exit(tmp_path):
    """rc 1 (the run ended without a kernel), the reason on one line, no traceback."""
    ref = write_ref(tmp_path, "sort", *REFS["none"])
    out = _orchestrate(
        "auto", "--reference", str(ref), "--model", "offline", "--target", "cpu", "--no-profile",
        "--test-cases", "0", "--iterations", "2", "--quiet", "--out", str(tmp_path / "runs"), cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    lines = [line for line in out.stderr.splitlines() if "no template fits" in line]
    assert (
        len(lines) == 1 and "(ops: sort; with them left to XLA: no stage is left for a kernel" in lines[0]
    ), out.stderr
    assert "Traceback" not in out.stderr and "planner reply unreadable" not in out.stderr


@pytest.mark.slow
def test_readme_auto_line_on_the_example_matmul(tmp_path):
    out = _orchestrate(
        "auto", "--reference", str(ROOT / "examples/matmul_reference.py"), "--target", "cpu", "--no-profile",
        "--test-cases", "0", "--model", "offline", "--iterations", "1", "--quiet", "--out", str(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    best = next(tmp_path.glob("*/best_kernel.py"))
    assert "pallas_call" in best.read_text() and "template=matmul" in best.read_text()


def test_describe_reference_over_mcp(tmp_path):
    """The tool runs the trace in a pool child; a reference that cannot trace is a ToolError, not a crash."""
    from mcp import Client

    from maxkernel.server.app import build_server

    bad = tmp_path / "bad_ref.py"
    bad.write_text(
        textwrap.dedent(HEADER) + "\nSHAPES = [(8, 8)]\n\n\ndef workload(x):\n    return x[int(x[0, 0])]\n"
    )

    async def go():
        server = build_server(workspace=str(tmp_path))
        async with Client(server) as c:
            good = await c.call_tool("describe_reference", {"reference": "12p_RMSNorm"})
            broken = await c.call_tool("describe_reference", {"reference": "bad_ref.py"})
            return good, broken

    good, broken = asyncio.run(go())
    assert not good.is_error and good.structured_content["census"].get("rsqrt") == 1
    assert broken.is_error and "failed to trace" in broken.content[0].text
