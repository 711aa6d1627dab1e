"""The model run's first two stages, cached in its run directory so a resumed run does not redo them.

`RUN_DIR/hotspots.json` holds the hotspot table; each extracted region is its reference file
(`RUN_DIR/suite/workspace/references/<id>.py`, where the suite's server finds it) and, written after
the file, `RUN_DIR/regions/<id>.json` (its ExtractReport): a file without its JSON is a half-done
extract from a killed run and is made again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from maxkernel.tpu_tools.model.compose import kernel_module
from maxkernel.tpu_tools.model.extract import ExtractReport
from maxkernel.tpu_tools.model.hotspots import HotspotReport

HOTSPOTS_FILE = "hotspots.json"
SUITE_DIR = "suite"


def reference_path(run_dir: Path, region: str) -> Path:
    return run_dir / SUITE_DIR / "workspace" / "references" / f"{kernel_module(region)[2:]}.py"


def _write(path: Path, text: str) -> None:
    """Atomically: a kill -9 leaves the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def hotspots(
    evaluator: Any, model: str, target: str, size: str | None, run_dir: Path | None, note: Any = None
) -> tuple[HotspotReport, bool]:
    """The hotspot table at the target and target size: from the run directory if it has it (True),
    else made in a pool child (False; the caller caches it with `save_hotspots` once the run exists)."""
    from maxkernel.tpu_tools.model.hotspots import hotspots_in_child

    cached = run_dir / HOTSPOTS_FILE if run_dir is not None else None
    if cached is not None and cached.is_file():
        return HotspotReport.model_validate_json(cached.read_text(encoding="utf-8")), True
    return hotspots_in_child(evaluator, model, target, size, on_progress=note), False


def save_hotspots(run_dir: Path, report: HotspotReport) -> None:
    _write(run_dir / HOTSPOTS_FILE, report.model_dump_json(indent=1))


RANKS = ("gain", "share")


def region_gain_us(cost: Any) -> float:
    """What a perfect kernel could win on a region over the whole step: total_us x (1 - 1/headroom)."""
    return cost.total_us * (1.0 - 1.0 / cost.headroom) if cost.headroom > 1.0 else 0.0


def top_regions(report: HotspotReport, k: int, rank: str = "gain") -> list[str]:
    """The K regions to optimize (a region XLA costed at nothing is no target). `gain` ranks by the time
    a perfect kernel could win (a near-roofline matmul of 40% of the step can win 1%; an attention of 8%
    at 7x headroom can win 7%); `share` by the share of the step. Ties keep the larger share first."""
    if rank not in RANKS:
        raise ValueError(f"rank should be one of {RANKS}, got {rank!r}")
    costed = [r for r in report.regions if r.total_us > 0]
    if rank == "gain":
        ranked = sorted(costed, key=lambda r: (-region_gain_us(r), -r.total_us))
    else:
        ranked = sorted(costed, key=lambda r: -r.total_us)
    return [r.region.id for r in ranked[:k]]


def extract(
    evaluator: Any, model: str, region: str, run_dir: Path, note: Any = None
) -> tuple[ExtractReport, bool]:
    """The region's reference file in the suite's workspace (cached: True when it was already there)."""
    from maxkernel.tpu_tools.model.extract import extract_in_child

    done = run_dir / "regions" / f"{kernel_module(region)[2:]}.json"
    path = reference_path(run_dir, region)
    if done.is_file() and path.is_file():
        return ExtractReport.model_validate_json(done.read_text(encoding="utf-8")), True
    path.unlink(missing_ok=True)  # a killed run's file without its report: made again
    report = extract_in_child(evaluator, model, region, str(path), on_progress=note)
    _write(done, report.model_dump_json(indent=1))
    return report, False
