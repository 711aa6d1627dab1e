"""Level-2 baselines retuned by the compiler's estimate: what the offline model's baseline walk can reach.

Per task with tuned parameters (clients/offline/baseline.py), the baseline as brought and each one-parameter
move (half, double) are rendered and estimated at the target size (`maxkernel estimate`, the baseline file as
the reference); then the best moves are combined once. Printed per task: the baseline's estimate, the best
variant's, the ratio and the tiers. An estimate is not a timing; a ratio is given only within one tier.
Validation is not run here (the Auto loop validates what it keeps).

    python benchmarks/level2_retune.py DIR [--target tpu-v6e] [--only 8p,1p] [--out retune.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from maxkernel.clients.offline.baseline import baseline_template

MAXKERNEL = [sys.executable, "-m", "maxkernel.tpu_tools.cli.main"]


def estimate(kernel: Path, reference: Path, target: str, timeout: float) -> tuple[float | None, str]:
    try:
        done = subprocess.run(
            [
                *MAXKERNEL,
                "estimate",
                str(kernel),
                "--reference",
                str(reference),
                "--target",
                target,
                "--timeout",
                str(timeout),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=timeout + 60,
        )
        report = json.loads(done.stdout)
    except (subprocess.TimeoutExpired, json.JSONDecodeError) as e:
        return None, type(e).__name__
    est = report.get("estimate") or {}
    if not report.get("ok") or est.get("estimated_time_us") is None:
        return None, ((report.get("failure") or {}).get("summary") or "no estimate")[:200]
    return float(est["estimated_time_us"]), str(est.get("tier"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--target", default="tpu-v6e")
    ap.add_argument("--only", default="")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    tasks = sorted(p.parent for p in a.folder.glob("*/baseline.py"))
    if a.only:
        tasks = [t for t in tasks if t.name.startswith(tuple(f"{x}_" for x in a.only.split(",")))]
    rows = []
    work = Path(tempfile.mkdtemp(prefix="retune-"))
    for task in tasks:
        ref = task / "baseline.py"
        template = baseline_template(ref.read_text())
        if template is None or not template.tunables:
            rows.append({"task": task.name, "tunables": 0})
            print(json.dumps(rows[-1]), flush=True)
            continue
        tried: dict[str, tuple[float | None, str]] = {}

        def run(cfg: dict, task=task, template=template, tried=tried, ref=ref) -> tuple[float | None, str]:
            key = json.dumps(cfg, sort_keys=True)
            if key not in tried:
                path = work / f"{task.name}_{len(tried)}.py"
                path.write_text(template.render(cfg, "program"))
                tried[key] = estimate(path, ref, a.target, a.timeout)
            return tried[key]

        base_cfg = dict(template.initial)
        base_us, base_tier = run(base_cfg)
        better: dict[str, int] = {}
        for name, values in template.tunables.items():
            for v in values:
                if v == base_cfg[name]:
                    continue
                us, tier = run({**base_cfg, name: v})
                if us is not None and (base_us is None or tier == base_tier and us < base_us):
                    if name not in better or us < run({**base_cfg, name: better[name]})[0]:
                        better[name] = v
        # a baseline the chip's compiler refuses (tuned for another chip): the fastest variant it accepts
        best_cfg, (best_us, best_tier) = base_cfg, (base_us, base_tier)
        if base_us is None and better:
            best_cfg = {
                **base_cfg,
                **dict([min(better.items(), key=lambda kv: run({**base_cfg, kv[0]: kv[1]})[0])]),
            }
            best_us, best_tier = run(best_cfg)
        for cfg in [{**base_cfg, k: v} for k, v in better.items()] + (
            [{**base_cfg, **better}] if len(better) > 1 else []
        ):
            us, tier = run(cfg)
            if us is not None and best_us is not None and tier == best_tier and us < best_us:
                best_cfg, best_us, best_tier = cfg, us, tier
        row = {
            "task": task.name,
            "tunables": len(template.tunables),
            "estimates": len(tried),
            "baseline_us": base_us,
            "baseline_tier": base_tier,
            "best_us": best_us,
            "best_tier": best_tier,
            "best": {k: v for k, v in best_cfg.items() if v != base_cfg[k]},
            "ratio": round(base_us / best_us, 4) if base_us and best_us and base_tier == best_tier else None,
            "baseline_why": None if base_us is not None else base_tier,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
