"""Turn a `jax.profiler.trace` capture into a short table an LLM or a person can act on.

A raw trace is megabytes of events; what a kernel author needs is "which ops dominate, how busy is
the device, what kind of time is it". This module reads any file the profiler writes (a logdir, the
`*.trace.json.gz` / `perfetto_trace.json.gz` Chrome traces, plain `.json`, or `*.xplane.pb` through
`jax.profiler.ProfileData`) into one event list, then aggregates XLA op events by (module, op) with
self time (nested intervals subtracted), categories, busy fraction and idle gaps.

On CPU the op events live on host threads (`/host:CPU`, args `hlo_module`/`hlo_op`). On TPU/GPU they
live on `/device:*` processes in "XLA Ops" lines; that path follows the xprof trace-viewer docs and
is untested on a device (no accelerator here).
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

CATEGORIES = ("pallas_mosaic", "xla_fusion", "copy_transfer_dma", "collective", "host_python", "other")
_TEXT_MAX_LINES = 40
_TRACE_SUFFIXES = (".trace.json.gz", ".json.gz", ".json", ".xplane.pb")


class TraceFormatError(ValueError):
    """The file is not a readable profiler trace (missing, empty, truncated, corrupt or unknown)."""


class OpStat(BaseModel):
    name: str = Field(description="HLO op name, e.g. 'fusion.3' or 'copy.16'")
    module: str = Field(description="HLO module, e.g. 'jit_matmul'")
    category: str
    count: int
    total_us: float
    self_us: float = Field(description="total minus time spent in ops nested inside it")
    mean_us: float
    pct_of_device_time: float = Field(description="self_us as % of all ops' self time")


class CategoryStat(BaseModel):
    self_us: float
    pct_of_device_time: float | None = Field(description="None for host_python (not device time)")
    count: int


class TraceSummary(BaseModel):
    source_file: str
    file_format: str = Field(description="'trace_json' or 'xplane'")
    backend: str = Field(description="'cpu', 'tpu' or 'gpu', from the trace's process names")
    op_source: str = Field(description="where op events came from: 'device' lines or 'host' threads")
    total_span_us: float = Field(description="first to last event of any kind")
    device_window_us: float = Field(description="first op start to last op end")
    device_busy_us: float = Field(description="union of op intervals (all devices/threads merged)")
    device_busy_fraction: float = Field(description="device_busy_us / device_window_us")
    idle_gap_count: int = Field(description="gaps between busy intervals of at least min_gap_us")
    largest_idle_gaps_us: list[float]
    n_op_events: int
    n_distinct_ops: int
    device_self_us: float = Field(description="sum of op self times; the base of every pct")
    categories: dict[str, CategoryStat]
    modules_self_us: dict[str, float]
    ops: list[OpStat] = Field(description="top ops by self time")
    text: str = Field(description="plain-text summary, at most 40 lines")


@dataclass
class _Event:
    process: str
    thread: str
    name: str
    start_us: float
    dur_us: float
    args: dict = field(default_factory=dict)

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


# ---------------------------------------------------------------- reading files


def resolve_trace_file(path: str | Path) -> Path:
    """A trace file, or the best file in a logdir / run dir (newest `plugins/profile/*/` run)."""
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(f"no such trace file or directory: {p}")
    if p.is_file():
        return p
    runs = sorted((d for d in (p / "plugins" / "profile").glob("*/") if d.is_dir()), key=lambda d: d.name)
    run = runs[-1] if runs else p
    for pattern in ("*.trace.json.gz", "perfetto_trace.json.gz", "*.json.gz", "*.json", "*.xplane.pb"):
        found = sorted(run.glob(pattern))
        if found:
            return found[0]
    raise TraceFormatError(f"no trace file ({', '.join(_TRACE_SUFFIXES)}) under {run}")


def load_events(path: str | Path) -> tuple[list[_Event], Path, str]:
    """All complete events in a trace as (events, resolved file, 'trace_json'|'xplane')."""
    fn = resolve_trace_file(path)
    raw = fn.read_bytes()
    if not raw:
        raise TraceFormatError(f"trace file is empty: {fn}")
    if fn.name.endswith(".pb"):
        events = _events_from_xplane(raw, fn)
        kind = "xplane"
    else:
        events = _events_from_chrome_json(_read_json(raw, fn), fn)
        kind = "trace_json"
    if not events:
        raise TraceFormatError(f"no trace events in {fn}")
    return events, fn, kind


def _read_json(raw: bytes, fn: Path):
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except EOFError as e:
            raise TraceFormatError(f"trace file is truncated gzip: {fn} ({e})") from None
        except (gzip.BadGzipFile, zlib.error) as e:
            raise TraceFormatError(f"trace file is corrupt gzip: {fn} ({e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if not text.lstrip().startswith(("{", "[")):
        raise TraceFormatError(f"trace file is not text JSON, gzip or xplane.pb (unknown format): {fn}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceFormatError(f"trace file is not valid JSON (truncated?): {fn}: {e}") from None


def _events_from_chrome_json(doc, fn: Path) -> list[_Event]:
    if isinstance(doc, dict):
        raw_events = doc.get("traceEvents")
    elif isinstance(doc, list):
        raw_events = doc
    else:
        raw_events = None
    if not isinstance(raw_events, list):
        raise TraceFormatError(f"no 'traceEvents' list in {fn} (not a Chrome/perfetto trace)")
    procs: dict = {}
    threads: dict = {}
    for e in raw_events:
        if isinstance(e, dict) and e.get("ph") == "M":
            name = (e.get("args") or {}).get("name", "")
            if e.get("name") == "process_name":
                procs[e.get("pid")] = name
            elif e.get("name") == "thread_name":
                threads[(e.get("pid"), e.get("tid"))] = name
    out = []
    for e in raw_events:
        if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e:
            continue
        pid, tid = e.get("pid"), e.get("tid")
        out.append(
            _Event(
                process=procs.get(pid, str(pid)),
                thread=threads.get((pid, tid), str(tid)),
                name=str(e.get("name", "")),
                start_us=float(e["ts"]),
                dur_us=float(e.get("dur", 0.0)),
                args=e.get("args") or {},
            )
        )
    return out


def _events_from_xplane(raw: bytes, fn: Path) -> list[_Event]:
    import jax.profiler  # only this path needs jax; JSON traces are read with the stdlib

    try:
        data = jax.profiler.ProfileData.from_serialized_xspace(raw)
    except Exception as e:  # jaxlib raises RuntimeError("Failed to parse XSpace ...")
        raise TraceFormatError(f"trace file is not a readable xplane.pb (truncated?): {fn}: {e}") from None
    out = []
    for plane in data.planes:
        for line in plane.lines:
            for ev in line.events:
                out.append(
                    _Event(
                        process=plane.name,
                        thread=line.name,
                        name=ev.name,
                        start_us=ev.start_ns / 1e3,
                        dur_us=ev.duration_ns / 1e3,
                        args={k: v for k, v in ev.stats},
                    )
                )
    return out


# ---------------------------------------------------------------- picking op events


def _is_device_process(process: str) -> bool:
    return process.startswith("/device:") and not process.startswith("/device:CUSTOM")


def _backend_of(events: list[_Event]) -> str:
    procs = {e.process for e in events}
    if any(p.startswith("/device:TPU") for p in procs):
        return "tpu"
    if any(p.startswith("/device:GPU") for p in procs):
        return "gpu"
    return "cpu"


def _strip_module_id(name: str) -> str:
    # "XLA Modules" events are named like "jit_matmul(1234)"
    return re.sub(r"\(\d+\)$", "", name)


def op_events(events: list[_Event]) -> tuple[list[_Event], str]:
    """XLA op events as (events with args['hlo_module'] filled in, 'device'|'host').

    Device path (TPU/GPU; untested on device, per the xprof trace-viewer docs): `/device:*`
    processes, "XLA Ops" lines; the module comes from the op's args or from the enclosing event on
    the same device's "XLA Modules" line. Host path (CPU): events carrying args `hlo_op`, ignoring
    the zero-work "end: <op>" twins.
    """
    dev = [e for e in events if _is_device_process(e.process) and e.thread == "XLA Ops"]
    if dev:
        modules = defaultdict(list)
        for e in events:
            if _is_device_process(e.process) and e.thread == "XLA Modules":
                modules[e.process].append(e)
        starts = {}
        for proc, mods in modules.items():
            mods.sort(key=lambda m: m.start_us)
            starts[proc] = [m.start_us for m in mods]
        for e in dev:
            if "hlo_module" not in e.args:
                # modules on one device run one at a time: the owner is the last one started before the op
                i = bisect.bisect_right(starts.get(e.process, []), e.start_us) - 1
                owner = modules[e.process][i] if i >= 0 else None
                inside = owner is not None and e.start_us < owner.end_us
                e.args = {**e.args, "hlo_module": _strip_module_id(owner.name) if inside else "?"}
            e.args.setdefault("hlo_op", e.name)
        return dev, "device"
    host = [e for e in events if "hlo_op" in e.args and not e.name.startswith("end: ")]
    return host, "host"


def module_executions(events: list[_Event]) -> list[tuple[str, float, float]]:
    """One (module, start_us, dur_us) per program execution, in start order.

    Device traces: the "XLA Modules" line of the first device (untested on device). Otherwise op
    events grouped by (module, run_id), spanning first op start to last op end.
    """
    dev_procs = sorted(
        {e.process for e in events if _is_device_process(e.process) and e.thread == "XLA Modules"}
    )
    if dev_procs:
        mods = [e for e in events if e.process == dev_procs[0] and e.thread == "XLA Modules"]
        return sorted(((_strip_module_id(m.name), m.start_us, m.dur_us) for m in mods), key=lambda t: t[1])
    ops, _ = op_events(events)
    runs: dict[tuple[str, str], list[float]] = {}
    for e in ops:
        key = (str(e.args.get("hlo_module", "?")), str(e.args.get("run_id", "")))
        span = runs.setdefault(key, [e.start_us, e.end_us])
        span[0] = min(span[0], e.start_us)
        span[1] = max(span[1], e.end_us)
    return sorted(((k[0], s, t - s) for k, (s, t) in runs.items()), key=lambda t: t[1])


# ---------------------------------------------------------------- aggregation


def categorize(name: str, module: str = "", hlo_category: str = "") -> str:
    """Coarse kind of an op, from its names (and xprof's hlo_category on device traces)."""
    n, m, c = name.lower(), module.lower(), hlo_category.lower()
    if "tpu_custom_call" in n or "mosaic" in n or "pallas" in n or "pallas" in m or "mosaic" in c:
        return "pallas_mosaic"
    if any(k in n for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective")):
        return "collective"
    if any(k in n for k in ("send", "recv")) or "collective" in c:
        return "collective"
    if n.startswith("copy") or any(k in n for k in ("dma", "transfer", "memcpy", "infeed", "outfeed")):
        return "copy_transfer_dma"
    if "data formatting" in c:
        return "copy_transfer_dma"
    base = re.sub(r"[.\d]+$", "", n)
    if "fusion" in n or base in (
        "dot",
        "convolution",
        "reduce",
        "reduce-window",
        "scatter",
        "gather",
        "sort",
    ):
        return "xla_fusion"
    return "other"


def _self_times(evs: list[_Event]) -> list[float]:
    """Self time of each event: its duration minus its direct children's (same thread, nested)."""
    self_us = [e.dur_us for e in evs]
    by_thread = defaultdict(list)
    for i, e in enumerate(evs):
        by_thread[(e.process, e.thread)].append(i)
    for idx in by_thread.values():
        idx.sort(key=lambda i: (evs[i].start_us, -evs[i].dur_us))
        stack: list[int] = []
        for i in idx:
            while stack and evs[stack[-1]].end_us <= evs[i].start_us:
                stack.pop()
            if stack:
                parent = stack[-1]
                overlap = min(evs[i].end_us, evs[parent].end_us) - evs[i].start_us
                self_us[parent] -= max(overlap, 0.0)
            stack.append(i)
    return [max(s, 0.0) for s in self_us]


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for s, t in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], t)
        else:
            merged.append([s, t])
    return [(s, t) for s, t in merged]


def _host_python_us(events: list[_Event]) -> tuple[float, int]:
    """Union of time on the Python thread (tracer frames, PjitFunction dispatch)."""
    py = [(e.start_us, e.end_us) for e in events if e.process.startswith("/host:") and e.thread == "python"]
    return sum(t - s for s, t in _union(py)), len(py)


def summarize_trace(path: str | Path, top: int = 15, *, min_gap_us: float = 1.0) -> TraceSummary:
    """Summarize a profiler trace (logdir, .trace.json.gz, perfetto_trace.json.gz, .json, .xplane.pb)."""
    events, fn, kind = load_events(path)
    ops, op_source = op_events(events)
    backend = _backend_of(events)
    selfs = _self_times(ops)
    device_self = sum(selfs)

    agg: dict[tuple[str, str], dict] = {}
    for e, s in zip(ops, selfs, strict=True):
        key = (str(e.args.get("hlo_module", "?")), str(e.args.get("hlo_op", e.name)))
        a = agg.setdefault(
            key, {"count": 0, "total": 0.0, "self": 0.0, "hcat": str(e.args.get("hlo_category", ""))}
        )
        a["count"] += 1
        a["total"] += e.dur_us
        a["self"] += s

    def pct(x: float) -> float:
        return 100.0 * x / device_self if device_self > 0 else 0.0

    table = [
        OpStat(
            name=op,
            module=mod,
            category=categorize(op, mod, a["hcat"]),
            count=a["count"],
            total_us=a["total"],
            self_us=a["self"],
            mean_us=a["total"] / a["count"],
            pct_of_device_time=pct(a["self"]),
        )
        for (mod, op), a in agg.items()
    ]
    table.sort(key=lambda o: o.self_us, reverse=True)

    cats = {c: CategoryStat(self_us=0.0, pct_of_device_time=0.0, count=0) for c in CATEGORIES}
    modules: dict[str, float] = defaultdict(float)
    for o in table:
        cats[o.category].self_us += o.self_us
        cats[o.category].count += o.count
        modules[o.module] += o.self_us
    for c in cats.values():
        c.pct_of_device_time = pct(c.self_us)
    py_us, py_n = _host_python_us(events)
    cats["host_python"] = CategoryStat(self_us=py_us, pct_of_device_time=None, count=py_n)

    busy = _union([(e.start_us, e.end_us) for e in ops])
    busy_us = sum(t - s for s, t in busy)
    window = (busy[-1][1] - busy[0][0]) if busy else 0.0
    gaps = sorted((b[0] - a[1] for a, b in zip(busy, busy[1:], strict=False)), reverse=True)
    gaps = [g for g in gaps if g >= min_gap_us]
    span = max(e.end_us for e in events) - min(e.start_us for e in events)

    summary = TraceSummary(
        source_file=str(fn),
        file_format=kind,
        backend=backend,
        op_source=op_source,
        total_span_us=span,
        device_window_us=window,
        device_busy_us=busy_us,
        device_busy_fraction=busy_us / window if window > 0 else 0.0,
        idle_gap_count=len(gaps),
        largest_idle_gaps_us=gaps[:5],
        n_op_events=len(ops),
        n_distinct_ops=len(table),
        device_self_us=device_self,
        categories=cats,
        modules_self_us=dict(sorted(modules.items(), key=lambda kv: -kv[1])),
        ops=table[:top],
        text="",
    )
    summary.text = _render_text(summary)
    return summary


# ---------------------------------------------------------------- text


def _hint(s: TraceSummary) -> str:
    c = {k: (v.pct_of_device_time or 0.0) for k, v in s.categories.items()}
    if not s.ops:
        return "no XLA op events: was the workload run (and blocked on) inside the trace?"
    if c["copy_transfer_dma"] >= 20:
        return f"copies take {c['copy_transfer_dma']:.0f}%: check for layout changes (transposes, relayouts) or avoidable HBM round-trips"
    if c["collective"] >= 20:
        return f"collectives take {c['collective']:.0f}%: check sharding and whether communication overlaps compute"
    if s.device_busy_fraction < 0.5:
        return f"device idle {100 * (1 - s.device_busy_fraction):.0f}% of its window: dispatch/host-bound, put more work per call"
    top = s.ops[0]
    if c["pallas_mosaic"] >= 50:
        return f"Pallas kernels take {c['pallas_mosaic']:.0f}%: tune block sizes and pipelining of the kernel"
    if top.pct_of_device_time >= 50:
        return f"{top.name} takes {top.pct_of_device_time:.0f}%: optimize it first"
    return "time is spread over many ops: look for fusion opportunities among the top ones"


def _render_text(s: TraceSummary) -> str:
    lines = [
        f"trace {Path(s.source_file).name} ({s.file_format}); backend {s.backend}; ops from {s.op_source}",
        f"span {s.total_span_us / 1e3:.2f} ms; op window {s.device_window_us / 1e3:.2f} ms; "
        f"busy {100 * s.device_busy_fraction:.0f}% ({s.device_busy_us / 1e3:.2f} ms); "
        f"{s.idle_gap_count} idle gaps, largest {', '.join(f'{g:.0f}' for g in s.largest_idle_gaps_us[:3]) or '-'} us",
        f"{s.n_op_events} op events, {s.n_distinct_ops} distinct ops, op self time {s.device_self_us / 1e3:.2f} ms",
    ]
    if s.backend == "cpu":
        lines.append("note: CPU host times; they do not predict TPU performance")
    cats = [(k, v) for k, v in s.categories.items() if k != "host_python" and v.self_us > 0]
    cats.sort(key=lambda kv: -kv[1].self_us)
    lines.append("categories: " + "; ".join(f"{k} {v.pct_of_device_time:.1f}%" for k, v in cats))
    py = s.categories["host_python"]
    if py.count:
        lines.append(f"host python thread busy {py.self_us / 1e3:.2f} ms ({py.count} events)")
    shown = s.ops[: _TEXT_MAX_LINES - len(lines) - 3]
    if shown:
        lines.append(f"top {len(shown)} ops by self time (pct | self us | count | category | module:op):")
        for o in shown:
            lines.append(
                f"  {o.pct_of_device_time:5.1f}% | {o.self_us:10.1f} | {o.count:4d} | {o.category} | {o.module}:{o.name}"
            )
    lines.append("hint: " + _hint(s))
    return "\n".join(lines[:_TEXT_MAX_LINES])
