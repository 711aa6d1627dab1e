"""The expert corpus's verdicts: published Pallas TPU kernels (jax's shipped ops, tokamax's), each behind
a thin workload in tests/kernels/corpus/, validated for tpu-v6e with default flags and with
`--check-size small`, next to the adversarial kernels that must keep failing in the same run.

Not a test: prints a table (kernel, verdict kind with default flags, with --check-size small, wall time
of each). A verdict kind is "ok" for a pass; `interpret_unsupported` says jax's TPU interpreter, not the
kernel, failed off the chip. tokamax's rows need the tokamax extra (`make venv` installs it).

    .venv/bin/python benchmarks/expert_corpus.py [--only NAME ...] [--seeds 1] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "kernels" / "corpus"
ADVERSARIAL = ROOT / "tests" / "kernels" / "adversarial"
MATMUL_REF = ROOT / "examples" / "matmul_reference.py"
PLUS_ONE_REF = ROOT / "tests" / "refs" / "plus_one_reference.py"

# kernel file, reference file: the expert kernels first, then adversaries that must fail
ROWS = [
    (CORPUS / "jax_matmul.py", MATMUL_REF),
    (CORPUS / "jax_flash_attention.py", CORPUS / "attention_reference.py"),
    (CORPUS / "jax_splash_attention.py", CORPUS / "attention_reference.py"),
    (CORPUS / "jax_megablox_gmm.py", CORPUS / "gmm_reference.py"),
    (CORPUS / "jax_megablox_tgmm.py", CORPUS / "tgmm_reference.py"),
    (CORPUS / "jax_paged_attention.py", CORPUS / "paged_attention_reference.py"),
    (CORPUS / "jax_ragged_paged_attention.py", CORPUS / "ragged_paged_attention_reference.py"),
    (CORPUS / "tokamax_flash_attention.py", CORPUS / "attention_reference.py"),
    (CORPUS / "tokamax_ragged_dot.py", CORPUS / "gmm_reference.py"),
    (ADVERSARIAL / "hardcoded_small_shape.py", PLUS_ONE_REF),
    (ADVERSARIAL / "zeros_above_rows.py", PLUS_ONE_REF),
    (ADVERSARIAL / "zeros_above_small.py", MATMUL_REF),
    (ADVERSARIAL / "right_for_three_calls.py", MATMUL_REF),
    (ADVERSARIAL / "raises_as_interpreter.py", MATMUL_REF),
    (ADVERSARIAL / "raises_through_interpreter.py", MATMUL_REF),
    (ADVERSARIAL / "raises_in_kernel_body.py", MATMUL_REF),
]


def _kind(report) -> str:
    return "ok" if report.ok else report.failure.kind


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="kernel names (file stems) to run")
    ap.add_argument("--seeds", type=int, default=1, help="input seeds per validation (default: 1)")
    ap.add_argument("--target", default="tpu-v6e", help="target (default: tpu-v6e)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()

    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.pool.workers import WorkerPool

    rows = [r for r in ROWS if not args.only or r[0].stem in args.only]
    has_tokamax = importlib.util.find_spec("tokamax") is not None
    out = []
    with WorkerPool(max_workers=2) as pool:
        ev = Evaluator(pool, timeout_s=600)
        for kernel, reference in rows:
            row = {"kernel": f"{kernel.parent.name}/{kernel.stem}"}
            if kernel.stem.startswith("tokamax") and not has_tokamax:
                row |= {"default": "skipped (no tokamax)", "small": "", "default_s": 0.0, "small_s": 0.0}
                out.append(row)
                continue
            for label, checks in (("default", None), ("small", ["small"])):
                t0 = time.perf_counter()
                r = ev.validate(
                    str(kernel), str(reference), args.target, seeds=args.seeds, check_sizes=checks
                )
                row[label] = _kind(r)
                row[f"{label}_s"] = round(time.perf_counter() - t0, 1)
                if r.failure is not None:
                    row[f"{label}_why"] = r.failure.summary[:160]
            out.append(row)
            print(
                f"  {row['kernel']}: default {row['default']} ({row['default_s']} s), "
                f"small {row['small']} ({row['small_s']} s)",
                flush=True,
            )
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    width = max(len(r["kernel"]) for r in out)
    print(f"\n{'kernel':<{width}}  {'default flags':<24} {'--check-size small':<24} wall (default / small)")
    for r in out:
        wall = f"{r['default_s']:.0f} s / {r['small_s']:.0f} s"
        print(f"{r['kernel']:<{width}}  {r['default']:<24} {r['small']:<24} {wall}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
