"""summarize_trace on a real CPU capture, its xplane twin, and broken files."""

import gzip

import jax
import jax.numpy as jnp
import pytest

from maxkernel.tpu_tools.profile.trace_summary import TraceFormatError, categorize, summarize_trace


def _mm_softmax(a, b):
    return jax.nn.softmax(a @ b, axis=-1)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("trace")  # unique per capture: same-second captures overwrite
    f = jax.jit(_mm_softmax)
    a = jnp.ones((256, 256), jnp.float32)
    b = jnp.full((256, 256), 0.5, jnp.float32)
    jax.block_until_ready(f(a, b))
    with jax.profiler.trace(str(logdir), create_perfetto_trace=True):
        for _ in range(3):
            jax.block_until_ready(f(a, b))
    (run,) = list((logdir / "plugins" / "profile").glob("*/"))
    return run


def _op_set(summary):
    return {(o.module, o.name) for o in summary.ops}


def test_logdir_summary_has_the_workload(run_dir):
    s = summarize_trace(run_dir.parent.parent.parent)
    assert s.source_file.endswith(".trace.json.gz")
    assert s.backend == "cpu" and s.op_source == "host"
    assert {o.module for o in s.ops} == {"jit__mm_softmax"}
    assert any("fusion" in o.name or "dot" in o.name for o in s.ops)
    assert all(o.count == 3 for o in s.ops)  # three calls; "end: " twins ignored
    assert sum(o.pct_of_device_time for o in s.ops) == pytest.approx(100.0, abs=0.5)
    assert sum(c.pct_of_device_time for c in s.categories.values() if c.pct_of_device_time is not None) == (
        pytest.approx(100.0, abs=0.5)
    )
    assert 0.0 < s.device_busy_fraction <= 1.0
    assert s.device_window_us <= s.total_span_us
    for o in s.ops:
        assert 0 <= o.self_us <= o.total_us + 1e-6


def test_text_is_short_and_says_what_dominates(run_dir):
    s = summarize_trace(run_dir)
    lines = s.text.splitlines()
    assert len(lines) <= 40
    assert s.ops[0].name in s.text
    assert lines[-1].startswith("hint: ")


def test_every_file_format_gives_the_same_ops(run_dir):
    base = summarize_trace(next(run_dir.glob("*.trace.json.gz")))
    perfetto = summarize_trace(run_dir / "perfetto_trace.json.gz")
    xplane = summarize_trace(next(run_dir.glob("*.xplane.pb")))
    assert xplane.file_format == "xplane"
    assert _op_set(base) == _op_set(perfetto) == _op_set(xplane)
    assert xplane.device_self_us == pytest.approx(base.device_self_us, rel=1e-3)


def test_plain_json(run_dir, tmp_path):
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.decompress(next(run_dir.glob("*.trace.json.gz")).read_bytes()))
    assert _op_set(summarize_trace(plain)) == _op_set(summarize_trace(run_dir))


def test_truncated_gzip(run_dir, tmp_path):
    data = next(run_dir.glob("*.trace.json.gz")).read_bytes()
    bad = tmp_path / "cut.trace.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="truncated gzip"):
        summarize_trace(bad)


def test_truncated_xplane(run_dir, tmp_path):
    data = next(run_dir.glob("*.xplane.pb")).read_bytes()
    bad = tmp_path / "cut.xplane.pb"
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(TraceFormatError, match="xplane"):
        summarize_trace(bad)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.trace.json.gz", b"", "empty"),
        ("empty.xplane.pb", b"", "empty"),
        ("events.json", b'{"traceEvents": []}', "no trace events"),
        ("other.json", b'{"hello": 1}', "no 'traceEvents'"),
        ("binary.json", b"\x00\xff\xfe junk", "unknown format"),
    ],
)
def test_bad_files(tmp_path, name, content, message):
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(TraceFormatError, match=message):
        summarize_trace(p)


def test_missing_path_and_empty_dir(tmp_path):
    with pytest.raises(TraceFormatError, match="no such trace"):
        summarize_trace(tmp_path / "nope")
    with pytest.raises(TraceFormatError, match="no trace file"):
        summarize_trace(tmp_path)


def test_device_layout_and_self_time(tmp_path):
    # Hand-written device trace in the xprof layout (the real one is untested here: no TPU).
    import json

    events = [
        {"ph": "M", "pid": 3, "name": "process_name", "args": {"name": "/device:TPU:0"}},
        {"ph": "M", "pid": 3, "tid": 1, "name": "thread_name", "args": {"name": "XLA Modules"}},
        {"ph": "M", "pid": 3, "tid": 2, "name": "thread_name", "args": {"name": "XLA Ops"}},
        {"ph": "X", "pid": 3, "tid": 1, "ts": 0, "dur": 100, "name": "jit_step(7)"},
        {"ph": "X", "pid": 3, "tid": 2, "ts": 0, "dur": 50, "name": "while.1"},
        {"ph": "X", "pid": 3, "tid": 2, "ts": 5, "dur": 40, "name": "tpu_custom_call.2"},
        {"ph": "X", "pid": 3, "tid": 2, "ts": 60, "dur": 30, "name": "copy.3"},
    ]
    p = tmp_path / "dev.json"
    p.write_text(json.dumps({"traceEvents": events}))
    s = summarize_trace(p)
    assert s.backend == "tpu" and s.op_source == "device"
    by = {o.name: o for o in s.ops}
    assert by["while.1"].self_us == pytest.approx(10.0)
    assert by["tpu_custom_call.2"].category == "pallas_mosaic"
    assert by["copy.3"].module == "jit_step"
    assert s.categories["copy_transfer_dma"].pct_of_device_time == pytest.approx(37.5)
    assert s.idle_gap_count == 1 and s.largest_idle_gaps_us == [pytest.approx(10.0)]
    assert "copies take" in s.text


def test_categorize():
    assert categorize("all-reduce.3") == "collective"
    assert categorize("copy-start.1") == "copy_transfer_dma"
    assert categorize("dot.4") == "xla_fusion"
    assert categorize("custom-call.1", hlo_category="mosaic") == "pallas_mosaic"
    assert categorize("while.2") == "other"
