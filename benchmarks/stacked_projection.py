"""The offline model's stacked-projection kernels against XLA, by static estimate at the production shape.

Not a test: prints a table. Twins of two library models' MLP projections at their full shapes (Gemma 2's
GeGLU gating einsum `BTD,2DF->BT2F`, recurrentgemma's `2DF,BTD->2FBT` + transpose + bias) are written to a
temp dir in f32 (as the tests' tiny library configs run) and bf16 (as released checkpoints run); for each,
the offline model's first kernel is written and `maxkernel estimate` is run on it and on the reference
itself (XLA's program, costed fusion by fusion), for each target. The table shows the kernel's estimate less
the program launch (as the model run reads it; the estimate never goes under the roofline), XLA's
dot fusion (the region as the model's step costs it; the reference alone also pays layout copies that a
model does not), and the MXU floor of the kernel's dot at the numerics it computes (the offline model writes
an f32 dot at DEFAULT as XLA runs it on a TPU, one bf16 pass; at HIGHEST as Mosaic's f32 matmul, six f32
passes of chips.F32_MXU_SLOWDOWN times bf16 each: tpu_tools/problem/dot_precision.py). The `highest` case is
Gemma 2's einsum at `precision='highest'`.

    .venv/bin/python benchmarks/stacked_projection.py [--targets tpu-v5e,tpu-v6e]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = str(ROOT / ".venv" / "bin" / "maxkernel")
LAUNCH_US = 5.0  # the estimate's fixed cost per program, left out of a kernel that runs inside a model's step
REF = """
import jax
import jax.numpy as jnp
from jax import lax

SIZES = {"full": {"b": 2, "t": 1024, "d": 1024, "f": F}, "small": {"b": 1, "t": 64, "d": 128, "f": 384}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    k = jax.random.split(key, 3)
    x = jax.random.normal(k[0], (s["b"], s["t"], s["d"])).astype(jnp.DTYPE)
    w = (jax.random.normal(k[1], (2, s["d"], s["f"])) * 0.09).astype(jnp.DTYPE)
    b = jax.random.normal(k[2], BIAS).astype(jnp.DTYPE)
    return x, w, b


def workload(x, w, b):
    return BODY
"""
CASES = {  # F at full, the bias's shape, the body (a bias on both, so that each has an epilogue)
    "gemma2 geglu": ("4096", '(2, s["f"])', "jnp.einsum('btd,gdf->btgf', x, w) + b"),
    "gemma2 highest": ("4096", '(2, s["f"])', "jnp.einsum('btd,gdf->btgf', x, w, precision='highest') + b"),
    "griffin ffw_up": (
        "3072",
        '(2, 1, 1, s["f"])',
        "lax.transpose(lax.dot_general(w, x, (((1,), (2,)), ((), ()))), (0, 2, 3, 1)) + b",
    ),
}


def estimate(kernel: Path, ref: Path, target: str) -> dict:
    out = subprocess.run(
        [CLI, "estimate", str(kernel), "-r", str(ref), "--target", target, "--size", "full", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out.returncode:
        raise SystemExit(f"estimate failed for {kernel}: {out.stderr.strip().splitlines()[-1:]}")
    data = json.loads(out.stdout)
    return data.get("estimate", data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="tpu-v5e,tpu-v6e")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT.parent))
    from maxkernel.clients.offline.first_kernel import first_kernel
    from maxkernel.tpu_tools.hardware.chips import get_chip
    from maxkernel.tpu_tools.problem.emit import dot_kind, dot_time_factor
    from maxkernel.tpu_tools.problem.program import describe

    print(
        f"{'case':16} {'dtype':9} {'target':8} {'kernel us':>10} {'XLA dot us':>11} {'MXU floor':>10}  config"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name, (f, bias, body) in CASES.items():
            for dtype in ("float32", "bfloat16"):
                ref = Path(tmp) / f"{name.replace(' ', '_')}_{dtype}.py"
                text = REF.replace("F}", f + "}").replace("DTYPE", dtype).replace("BIAS", bias)
                ref.write_text(text.replace("BODY", body))
                for target in args.targets.split(","):
                    program = describe(str(ref)).model_dump(mode="json")
                    source = first_kernel(program, get_chip(target))
                    dot = next(e for e in program["equations"] if e["primitive"] == "dot_general")
                    slow = dot_time_factor(dot_kind(program, dot))
                    kernel = ref.with_name(ref.stem + f"_{target}_kernel.py")
                    kernel.write_text(source)
                    config = next(x for x in source.splitlines() if "offline-config" in x).split(": ", 1)[1]
                    k = estimate(kernel, ref, target)
                    x = estimate(ref, ref, target)
                    dot = max(
                        fu["estimated_time_us"] for fu in x["xla_fusions"]["fusions"] if fu["flops"] > 0
                    )
                    chip = get_chip(target)
                    floor = k["flops"] / (chip.peak_bf16_tflops * 1e12) * 1e6 * slow
                    call = k["estimated_time_us"] - LAUNCH_US  # as the model run reads a region's kernel
                    print(f"{name:16} {dtype:9} {target:8} {call:10.1f} {dot:11.1f} {floor:10.1f}  {config}")


if __name__ == "__main__":
    main()
