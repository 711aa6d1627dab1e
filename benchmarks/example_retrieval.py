"""Does find_examples put the right working kernel in front of the roles? hit@1 and hit@3.

Two sets, each queried exactly as the prompts query, through the MCP tool in an in-memory session:
- tasks: JaxBench tasks with an obvious example, asked as the orchestrator's planner/implementer ask
  (`find_examples(reference=<task id>, kinds=["kernel"], k=3)`: the server reads the reference's CONFIG
  operator and workload primitives; the task's own Pallas reference is left out). Right answers:
  attention (1p 2p 3p 5p 7p) -> jax's flash, splash or ragged paged attention; 6p -> jax's paged attention;
  11p, 14p -> jax's megablox gmm; 8p, 41k and every other Gemm/Matmul k task -> a matmul kernel (jax's
  `matmul`, or a JaxBench matmul reference other than the task's own).
- errors: real Mosaic/Pallas failures, produced now by compiling broken kernels for tpu-v6e
  (tests/kernels/ and benchmarks/broken_kernels/), asked as the debugger asks
  (`find_examples(error="compile failed: <summary>\\n<message>", k=3)`). Right answers: the guide section
  or the kernels that show the fix (listed per case below).

Run: .venv/bin/python benchmarks/example_retrieval.py [--json]   (about 20 s: ten tpu-v6e compiles)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
from pathlib import Path

from mcp import Client

from maxkernel.jaxbench.registry import list_task_ids
from maxkernel.server.app import build_server
from maxkernel.subagents import MAX_EXAMPLES, MIN_SCORE_RATIO, retrieval_budget
from maxkernel.tpu_tools.judge.evaluate import Evaluator

ROOT = Path(__file__).resolve().parent.parent
MATMUL_REF = ROOT / "examples" / "matmul_reference.py"
ATTENTION = r"^jax\.(flash_attention|splash_attention|ragged_paged_attention)\."
MATMUL = r"^(jax\.matmul\.|jaxbench\.(8p_GEMM|19k_Matmul_Subtract_Multiply_ReLU)\._matmul)"
TASKS: dict[str, str] = {
    "1p": ATTENTION,
    "2p": ATTENTION,
    "3p": ATTENTION,
    "5p": ATTENTION,
    "7p": ATTENTION,
    "6p": r"^jax\.paged_attention\.",
    "11p": r"^jax\.megablox\.gmm\.",
    "14p": r"^jax\.megablox\.gmm\.",
    "8p": MATMUL,
}
# kernel file -> (what is wrong, ids (regex) of the guide sections / kernels that show the fix)
ERRORS: dict[str, tuple[str, str]] = {
    "tests/kernels/bad_block.py": ("block (100,128)", r"^guide\.block-shapes"),
    "benchmarks/broken_kernels/narrow_block.py": ("block (128,64) on bf16", r"^guide\.block-shapes"),
    "tests/kernels/vmem_1gib.py": ("1 GiB scratch", r"^guide\.vmem-budgets$|VMEM_LIMIT"),
    "benchmarks/broken_kernels/big_blocks.py": ("256 MiB of blocks", r"^guide\.vmem-budgets$|VMEM_LIMIT"),
    "tests/kernels/unsupported_op.py": ("jnp.sort in kernel", r"^guide\.common-errors"),
    "benchmarks/broken_kernels/argsort_op.py": ("jnp.argsort in kernel", r"^guide\.common-errors"),
    "tests/kernels/f16_cast.py": ("float16 cast", r"^guide\.(dtypes|common-errors)"),
    "benchmarks/broken_kernels/int_matmul.py": ("int32 matmul", r"^guide\.(dtypes|common-errors)"),
    "benchmarks/broken_kernels/any_block.py": (
        "partial block on memory space ANY",
        r"^guide\.(common-errors|manual-dma)|HBM_ANY",
    ),
    "benchmarks/broken_kernels/cost_float.py": (
        "float CostEstimate",
        r"^guide\.(cost-estimates|common-errors)",
    ),
    "benchmarks/broken_kernels/semantics_len.py": (
        "1 semantic for a 2-D grid",
        r"^guide\.dimension-semantics",
    ),
}


def gemm_tasks() -> list[str]:
    """Every k task whose name is a Gemm/Matmul followed by elementwise/reduction epilogues."""
    return [t for t in list_task_ids() if re.match(r"^\d+k_(Gemm|Matmul)_", t)]


def is_hit(hit: dict, expected: str) -> bool:
    if "VMEM_LIMIT" in expected and hit["kind"] == "kernel" and "vmem_limit_bytes" in hit["features"]:
        return True
    if "HBM_ANY" in expected and hit["kind"] == "kernel" and "hbm_any" in hit["features"]:
        return True
    return re.search(expected.replace("|VMEM_LIMIT", "").replace("|HBM_ANY", ""), hit["id"]) is not None


def rank(hits: list[dict], expected: str) -> int | None:
    return next((i + 1 for i, h in enumerate(hits) if is_hit(h, expected)), None)


def error_text(kernel: str) -> tuple[str, str]:
    """Compile `kernel` for tpu-v6e; the debugger's error text exactly as clients/auto/loop.py builds it."""
    report = Evaluator(timeout_s=600).compile(str(ROOT / kernel), str(MATMUL_REF), "tpu-v6e", "small")
    if report.ok or report.failure is None:
        return "", "compiled (no error to look up)"
    f = report.failure
    if f.kind == "timeout":  # a loaded machine, not the kernel's error: nothing real to look up
        return "", f"skipped: {f.summary}"
    text = "\n".join(p for p in (f.summary, f.message) if p).strip()
    return f"compile failed: {text}", f.summary


async def run() -> dict:
    rows: list[dict] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory() as ws:
        async with Client(build_server(ws), raise_exceptions=True) as c:

            async def ask(args: dict) -> list[dict]:
                r = await c.call_tool("find_examples", args)
                if r.is_error:
                    raise RuntimeError(r.content[0].text)
                return r.structured_content["hits"]

            for task in [*TASKS, *gemm_tasks()]:
                expected = TASKS.get(task, MATMUL)
                hits = await ask(
                    {
                        "reference": task,
                        "kinds": ["kernel"],
                        "k": 3,
                        "budget_tokens": retrieval_budget("planner"),
                    }
                )
                rows.append(
                    {
                        "set": "tasks",
                        "case": task,
                        "rank": rank(hits, expected),
                        "top": [h["id"] for h in hits],
                    }
                )
            for kernel, (what, expected) in ERRORS.items():
                text, summary = await asyncio.to_thread(error_text, kernel)
                hits = (
                    await ask(
                        {
                            "error": text,
                            "k": MAX_EXAMPLES,
                            "budget_tokens": retrieval_budget("debugger"),
                            "min_score_ratio": MIN_SCORE_RATIO,
                        }
                    )
                    if text
                    else []
                )
                rows.append(
                    {
                        "set": "errors",
                        "case": f"{Path(kernel).stem} ({what})",
                        "error": summary[:160],
                        "rank": rank(hits, expected),
                        "top": [h["id"] for h in hits],
                    }
                )
    out: dict = {"rows": rows, "skipped": skipped, "summary": {}}
    for name in ("tasks", "errors", "all"):
        sel = [r for r in rows if name == "all" or r["set"] == name]
        n = len(sel)
        out["summary"][name] = {
            "n": n,
            "hit@1": round(sum(1 for r in sel if r["rank"] == 1) / n, 3) if n else None,
            "hit@3": round(sum(1 for r in sel if r["rank"] and r["rank"] <= 3) / n, 3) if n else None,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    out = asyncio.run(run())
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for r in out["rows"]:
        mark = f"hit@{r['rank']}" if r["rank"] else "MISS "
        print(f"{r['set']:6} {mark:6} {r['case'][:44]:44} top: {', '.join(t[:48] for t in r['top'])}")
        if r.get("error"):
            print(f"{'':14}error: {r['error']}")
    for line in out["skipped"]:
        print(f"skipped {line}")
    for name, s in out["summary"].items():
        print(f"{name:6}: n={s['n']:2}  hit@1 {s['hit@1']:.2f}  hit@3 {s['hit@3']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
