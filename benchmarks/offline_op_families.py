"""The offline model's pooling, convolution, scan and arg-reduction kernels on the op references.

Not a test: prints a table. For each reference (tests/refs/ops by default, or the files given), the
offline model writes its first kernel (planner + implementer on the traced program, in-process); then
the real CLI runs on it: `maxkernel compile` at the production size for each --targets chip (compile
only), `maxkernel validate` (compile at full for the first target, then the judge's default check sizes
in interpret mode), and `maxkernel estimate` of the kernel and of the reference itself (the XLA
baseline) at full on the first target. Estimates are static (their tier is printed), never timings.

    .venv/bin/python benchmarks/offline_op_families.py [--targets tpu-v6e,tpu-v5e] [--out DIR] [REF[=COPY]...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXE = str(Path(sys.executable).parent / "maxkernel")


def _cli(*args: str, timeout_s: float = 900) -> dict:
    proc = subprocess.run([EXE, *args, "--json"], capture_output=True, text=True, timeout=timeout_s)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {"ok": False, "failure": {"kind": f"rc {proc.returncode}", "message": proc.stderr[-300:]}}


def _verdict(report: dict) -> str:
    return "ok" if report.get("ok") else (report.get("failure") or {}).get("kind", "failed")


def _estimate(report: dict) -> tuple[float | None, str]:
    est = report.get("estimate") or {}
    return est.get("estimated_time_us"), est.get("tier", "-")


def run_one(ref: Path, targets: list[str], out: Path, xla: Path | None = None) -> dict:
    from maxkernel.clients.offline.first_kernel import NoKernel, first_kernel
    from maxkernel.clients.offline.model import NoTemplateFits
    from maxkernel.tpu_tools.hardware.chips import get_chip
    from maxkernel.tpu_tools.problem.program import describe

    name = ref.name.removesuffix(".py").removesuffix("_reference")
    row: dict = {"name": name}
    try:
        source = first_kernel(describe(str(ref)).model_dump(mode="json"), get_chip(targets[0]))
    except (NoKernel, NoTemplateFits) as e:
        return row | {"kernel": f"none: {str(e)[:160]}"}
    kernel = out / f"{name}_kernel.py"
    kernel.write_text(source)
    row["kernel"] = next(
        (ln.split("template=")[1].split()[0] for ln in source.splitlines() if "template=" in ln), "?"
    )
    for t in targets:
        row[f"compile_{t}"] = _verdict(
            _cli("compile", str(kernel), "-r", str(ref), "--target", t, "--size", "full")
        )
    row["validate"] = _verdict(_cli("validate", str(kernel), "-r", str(ref), "--target", targets[0]))
    row["kernel_us"], row["kernel_tier"] = _estimate(
        _cli("estimate", str(kernel), "-r", str(ref), "-t", targets[0])
    )
    # the reference itself is the XLA baseline; a JaxBench task file imports maxkernel (the judge refuses
    # it as a candidate), so REF=COPY names a plain-JAX copy of its workload to estimate instead
    xla_file = str(xla or ref)
    row["xla_us"], row["xla_tier"] = _estimate(_cli("estimate", xla_file, "-r", str(ref), "-t", targets[0]))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "refs",
        nargs="*",
        help="REF or REF=COPY (COPY: a plain-JAX copy of REF's workload, estimated as "
        "the XLA baseline); default: tests/refs/ops/*_reference.py",
    )
    ap.add_argument(
        "--targets", default="tpu-v6e,tpu-v5e", help="chips to compile for; the first one validates"
    )
    ap.add_argument("--out", default="/tmp/offline_op_families", help="where kernels and results go")
    args = ap.parse_args()
    pairs = [r.split("=", 1) if "=" in r else [r, ""] for r in args.refs]
    refs = [(Path(r), Path(c) if c else None) for r, c in pairs] or [
        (p, None) for p in sorted((ROOT / "tests" / "refs" / "ops").glob("*_reference.py"))
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    rows = []
    for ref, xla in refs:
        row = run_one(ref, targets, out, xla)
        (out / f"{row['name']}.json").write_text(json.dumps(row, indent=2))
        rows.append(row)
        print(json.dumps(row), flush=True)

    def us(v):
        return f"{v:.0f}" if isinstance(v, (int, float)) else "-"

    cols = [f"compile_{t}" for t in targets]
    print(f"\n{'reference':22s} {'template':11s} " + " ".join(f"{c[8:]:>9s}" for c in cols) + "  validate "
          f"{'kernel us':>10s} {'XLA us':>10s} {'ratio':>6s} tier")  # fmt: skip
    for r in rows:
        k, x = r.get("kernel_us"), r.get("xla_us")
        ratio = f"{x / k:.2f}" if isinstance(k, float) and isinstance(x, float) and k else "-"
        print(
            f"{r['name']:22s} {str(r.get('kernel'))[:11]:11s} "
            + " ".join(f"{r.get(c, '-'):>9s}" for c in cols)
            + f"  {r.get('validate', '-'):8s} {us(k):>10s} {us(x):>10s} {ratio:>6s} "
            f"{r.get('kernel_tier', '-')}/{r.get('xla_tier', '-')}"
        )
    print(
        "ratio = XLA estimate / kernel estimate (> 1: the kernel is estimated faster); estimates, not timings"
    )


if __name__ == "__main__":
    main()
