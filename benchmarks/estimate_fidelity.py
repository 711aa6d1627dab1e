"""How well the static estimate predicts published TPU timings, per chip: before (main) vs after (this tree).

Points: benchmarks/data/*.csv (v5e Pallas matmuls: the JAX docs' tutorial table, and sqtian's sweeps,
held out) and /work/shared/calibration/published_v6e.csv: its XLA rows (v6e einsum+softmax attention,
which XLA_HBM_EFFICIENCY was fitted on, and linear+cross-entropy, held out) and its Pallas attention rows
(tokamax's kernel; jax's splash attention at the same blocks stands in for it, as the README allows).
The kernel side (pallas_calls) and the XLA side (plain JAX) are reported apart: within [0.8, 1.25],
Spearman, and the pick between kernel and XLA where both were timed on one shape; then the tier of every
XLA-side estimate, with programs that have no published time (a donated KV-cache loop, a tiny attention,
lax.ragged_dot, a decode step's index math), before and after; and KV-cache updates as serving stacks write
them (KV_PROGRAMS: a paged cache scattered at the decode tokens' slots, flat or paged, a decode step's
dynamic-update-slice; donated, and not donated so that XLA copies the cache) on v6e and v5e, each printed
beside a first-principles BOUND (the bytes it must touch at the chip's HBM peak), never a measurement. Each point is rebuilt
(`acc_scratch`: the docs' matmul with an f32 VMEM accumulator; `acc_out`: accumulating into the output
block; the XLA programs as the calibration README describes them), traced and compiled for its chip with
libtpu's LLO dump, and estimated the way `maxkernel estimate` does (analyze.estimate_one):

- before: the estimator of `--before` (default main), run in a child on `git archive` of that revision;
- after:  this tree's estimator.

The docs' points are `timeit` of a jitted call, so each includes host dispatch: a dispatch floor is
added to every estimate, measured from the points whose kernel runs in 2 grid steps, per estimator.
The xprof rows are device times: no floor. Per series it prints Spearman, estimate/measured ratios and
pick-loss (measured time of the estimate's pick / measured best - 1; only where a series is configs of
one problem), and per chip: points within [0.8, 1.25], Spearman per series, worst pick-loss.

    .venv/bin/python benchmarks/estimate_fidelity.py [--json OUT] [--before REV] [--only KINDS]

`--only xla_program` (or program names, or `xla_attention,xla_xent`, `splash`, `matmul`) runs a subset.

Compiles only (no chip); about 20 minutes per estimator on 2 shared cores (the LLO dump makes big
compiles several times slower). Kernels compile with vmem_limit_bytes=100 MiB: the published f32
512x1024x1024 config ran, but needs more than v5e's 16 MiB default.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CALIBRATION = Path("/work/shared/calibration/published_v6e.csv")
os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")


def load_points(data_dir: Path) -> list[dict]:
    rows = []
    for f in sorted(data_dir.glob("*.csv")):
        with f.open() as fh:
            rows += [dict(r, file=f.name) for r in csv.DictReader(fh)]
    for r in rows:
        for k in ("n", "bm", "bk", "bn"):
            r[k] = int(r[k])
        r["measured_ms"] = float(r["measured_ms"])
    return rows


def kernel_fn(kind: str, bm: int, bk: int, bn: int):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def acc_scratch(x_ref, y_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    def acc_out(x_ref, y_ref, o_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += x_ref[...] @ y_ref[...]

    def mm(x, y):
        m, k = x.shape
        n = y.shape[1]
        return pl.pallas_call(
            acc_scratch if kind == "acc_scratch" else acc_out,
            grid=(m // bm, n // bn, k // bk),
            in_specs=[
                pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)] if kind == "acc_scratch" else [],
            compiler_params=pltpu.CompilerParams(
                dimension_semantics=("parallel", "parallel", "arbitrary"), vmem_limit_bytes=100 << 20
            ),
        )(x, y)

    return mm


def spearman(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 2:
        return None

    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        for rank, i in enumerate(order):
            r[i] = float(rank)
        return r

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else None


def _aot(chip: str):
    from maxkernel.tpu_tools.hardware import execution
    from maxkernel.tpu_tools.hardware.targets import parse_target

    tgt = parse_target(chip)
    return execution.aot_sharding(tgt), execution.abstract_tpu_mesh(tgt)


def _attention(causal: bool):
    import jax.numpy as jnp

    def attention(q, k, v):
        """einsum -> f32 softmax -> einsum over [B,S,H,D] (the calibration README's xla_plain)."""
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) / q.shape[-1] ** 0.5
        if causal:
            s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -jnp.inf)
        e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        p = e / jnp.sum(e, axis=-1, keepdims=True)
        o = jnp.einsum("bhqk,bkhd->bqhd", p, v.astype(jnp.float32), preferred_element_type=jnp.float32)
        return o.astype(q.dtype)

    return attention


def _xent(x, w, labels):
    """Mean softmax cross-entropy of x @ w (f32 logits) against integer labels."""
    import jax
    import jax.numpy as jnp

    logits = jnp.dot(x, w, preferred_element_type=jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    return jnp.mean(lse - jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0])


def calibration_points(path: Path) -> list[dict]:
    """The XLA rows of shared/calibration (v6e): attention (einsum+softmax) and linear+cross-entropy."""
    rows = []
    with path.open() as fh:
        for r in csv.DictReader(fh):
            nums = [int(x) for x in re.findall(r"\d+", r["shape"].split("=")[-1])]
            if r["implementation"] == "xla_plain_einsum_softmax":
                rows.append({"chip": r["chip"], "kernel": "xla_attention", "shape": nums[:4],
                             "causal": r["causal"] == "Y", "measured_ms": float(r["published_ms"]),
                             "fitted": True, "source": r["source"]})  # fmt: skip
            elif r["op"].startswith("linear_softmax_xent") and r["implementation"] == "xla":
                rows.append({"chip": r["chip"], "kernel": "xla_xent", "shape": nums[:3], "causal": False,
                             "measured_ms": float(r["published_ms"]), "fitted": False, "source": r["source"]})  # fmt: skip
            elif r["implementation"] == "pallas_tokamax_splash":
                blocks = [int(x) for x in r["config"].split("=")[-1].split("/")]
                rows.append({"chip": r["chip"], "kernel": "splash", "shape": nums[:4], "blocks": blocks,
                             "causal": r["causal"] == "Y", "measured_ms": float(r["published_ms"]),
                             "fitted": False, "source": r["source"]})  # fmt: skip
    return rows


# Plain-JAX programs with no published device time: their XLA-side estimate and tier (the goal: `llo` for every
# program that compiles), on each chip. (name, shapes, donated args).
XLA_PROGRAMS = {
    "kv_cache_loop": (
        [((8, 16384, 8, 128), "bfloat16"), ((8, 8, 128), "float32"), ((128, 128), "float32")],
        (0,),
    ),
    "tiny_attention": ([((1, 128, 4, 64), "bfloat16")] * 3, ()),
    "ragged_dot": ([((8192, 2048), "bfloat16"), ((8, 2048, 4096), "bfloat16"), ((8,), "int32")], ()),
    # A decode step's bookkeeping: tiny fusions whose time is their schedule and their DMA round trips.
    "decode_index_math": (
        [((64,), "int32"), ((64,), "int32"), ((64, 512), "int32"), ((64,), "int32")],
        (),
    ),
}
XLA_PROGRAM_CHIPS = ("tpu-v6e", "tpu-v5e")

# KV-cache updates as serving stacks write them (shapes from their public configs, one layer): a paged cache
# [num_blocks, block_size, kv_heads, head_dim] bf16 updated at a batch of decode tokens' slots (vLLM /
# tpu-inference: `cache.at[slot_mapping].set(kv)`, K and V, the caches donated: XLA scatters in place), the
# same flattened to [num_slots, kv_heads * head_dim], and one decode step's [B, 1, H, D] written at its
# position into [B, S, H, D] (MaxText / gemma: lax.dynamic_update_slice, donated); and the scatter and the
# update with the cache not donated, where XLA must copy the whole cache. name: (shapes, donated args).
KV_PROGRAMS = {
    "kv_scatter_paged": (
        [((2048, 16, 8, 128), "bfloat16")] * 2 + [((128, 8, 128), "bfloat16")] * 2 + [((128,), "int32")],
        (0, 1),
    ),
    "kv_scatter_flat": (
        [((32768, 1024), "bfloat16"), ((256, 1024), "bfloat16"), ((256,), "int32")],
        (0,),
    ),
    "kv_dus_decode": ([((8, 8192, 8, 128), "bfloat16"), ((8, 1, 8, 128), "bfloat16"), ((), "int32")], (0,)),
    "kv_scatter_paged_not_donated": (
        [((2048, 16, 8, 128), "bfloat16"), ((128, 8, 128), "bfloat16"), ((128,), "int32")],
        (),
    ),
    "kv_dus_decode_not_donated": (
        [((8, 8192, 8, 128), "bfloat16"), ((8, 1, 8, 128), "bfloat16"), ((), "int32")],
        (),
    ),
}


def kv_touched_bytes(name: str) -> int:
    """Bytes a KV-cache update must move between HBM and the core, from its shapes alone (not the estimator's
    count): every input but the caches read (updates, slots), each update's rows written into its cache, and,
    for a cache not donated, the whole cache read and written once (XLA's copy into the output buffer)."""
    import math

    import jax.numpy as jnp

    shapes, donated = KV_PROGRAMS[name]
    size = [math.prod(s) * jnp.dtype(d).itemsize for s, d in shapes]
    caches = {i for i, b in enumerate(size) if b == max(size)}
    read = sum(b for i, b in enumerate(size) if i not in caches)
    written = sum(
        b for i, ((s, _), b) in enumerate(zip(shapes, size, strict=True)) if i not in caches and len(s) >= 2
    )
    copy = sum(2 * size[i] for i in caches if i not in donated)
    return read + written + copy


def kv_bound_us(name: str, chip: str) -> float:
    """The first-principles floor of a KV-cache update: its touched bytes at the chip's HBM bandwidth (no
    launch, no DMA latency). A bound to print beside the estimate, not a measurement."""
    from maxkernel.tpu_tools.hardware.chips import get_chip

    return kv_touched_bytes(name) / get_chip(chip).hbm_bytes_per_s * 1e6


def _xla_program(name: str):
    import jax
    import jax.numpy as jnp

    def kv_cache_loop(cache, x, w):
        """128 decode steps, each writing one slot of a 268 MB cache (donated: updated in place)."""

        def step(i, carry):
            c, h = carry
            h = jnp.tanh(h @ w)
            return jax.lax.dynamic_update_slice(c, h.astype(c.dtype).reshape(8, 1, 8, 128), (0, i, 0, 0)), h

        return jax.lax.fori_loop(0, 128, step, (cache, x))

    def ragged_dot(x, w, group_sizes):
        return jax.lax.ragged_dot(x, w, group_sizes)

    def decode_index_math(positions, lengths, block_tables, tokens):
        """Next positions, slots from the block table, the attention mask, the stop flags."""
        pos = positions + 1
        block = jnp.take_along_axis(block_tables, (pos // 16)[:, None], axis=1)[:, 0]
        slots = block * 16 + pos % 16
        new_len = jnp.minimum(lengths + 1, 8192)
        mask = jnp.arange(8192)[None, :] < new_len[:, None]
        return pos, slots, new_len, mask, (tokens == 2) | (new_len >= 8192)

    def paged_scatter(k_cache, v_cache, k, v, slots):
        """[blocks, block_size, H, D] caches, one row per token at its slot (block * block_size + offset)."""
        nb, bs, h, d = k_cache.shape
        k_cache = k_cache.reshape(nb * bs, h, d).at[slots].set(k).reshape(k_cache.shape)
        v_cache = v_cache.reshape(nb * bs, h, d).at[slots].set(v).reshape(v_cache.shape)
        return k_cache, v_cache

    def paged_scatter_one(cache, kv, slots):
        nb, bs, h, d = cache.shape
        return cache.reshape(nb * bs, h, d).at[slots].set(kv).reshape(cache.shape)

    def flat_scatter(cache, kv, slots):
        return cache.at[slots].set(kv)

    def decode_update(cache, kv, pos):
        return jax.lax.dynamic_update_slice(cache, kv, (0, pos, 0, 0))

    return {
        "kv_cache_loop": kv_cache_loop,
        "tiny_attention": _attention(True),
        "ragged_dot": ragged_dot,
        "decode_index_math": decode_index_math,
        "kv_scatter_paged": paged_scatter,
        "kv_scatter_flat": flat_scatter,
        "kv_dus_decode": decode_update,
        "kv_scatter_paged_not_donated": paged_scatter_one,
        "kv_dus_decode_not_donated": decode_update,
    }[name]


def _splash(b: int, s: int, h: int, d: int, causal: bool, blocks: list[int]):
    """jax's splash attention forward at the published blocks, q/k/v [B, H, S, D] (its own layout): the
    calibration README's proxy for tokamax's Pallas attention."""
    import jax
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    mask = sm.MultiHeadMask([sm.CausalMask((s, s)) if causal else sm.FullMask((s, s)) for _ in range(h)])
    bq, bkv, bkvc = blocks
    sizes = sk.BlockSizes(block_q=bq, block_kv=bkv, block_kv_compute=bkvc)
    kernel = sk.make_splash_mha(mask, block_sizes=sizes, head_shards=1, q_seq_shards=1)
    return jax.vmap(kernel)


def estimate_all(points: list[dict], cal: list[dict], kinds: set[str] | None = None) -> dict:
    """{key: estimated us} for every point, with whatever estimator `maxkernel` resolves to in this process.

    The same path a user's `estimate` takes (analyze.estimate_one: trace, compile with the LLO dump,
    cost), so it runs unchanged against main's tree (the `before`) and this one (`after`).
    """
    from maxkernel.tpu_tools.cost.llo_dump import enable_dump

    dump = enable_dump()
    import jax
    import jax.numpy as jnp

    from maxkernel.tpu_tools.cost.analyze import estimate_one
    from maxkernel.tpu_tools.problem.pallas_info import find_pallas_calls

    out: dict[str, dict] = {}

    def run(key, fn, shapes, chip, donate=()):
        sharding, scope = _aot(chip)
        args = [jax.ShapeDtypeStruct(s, d, sharding=sharding) for s, d in shapes]
        with scope:
            traced = jax.jit(fn, donate_argnums=donate).trace(*args)
            calls = find_pallas_calls(traced.jaxpr)
            try:
                est, _, facts = estimate_one(fn, args, calls, chip, dump, None, traced=traced)
            except Exception as e:  # reported, never silently dropped
                print(f"estimate failed for {key}: {str(e).splitlines()[0][:200]}", file=sys.stderr)
                return
        if est is not None and "error" not in facts:
            table = getattr(est, "xla_fusions", None)
            out[key] = {"us": est.estimated_time_us, "tier": est.tier, "note": est.tier_note,
                        "fallbacks": getattr(table, "fallbacks", None) if table is not None else None}  # fmt: skip
        else:
            print(f"no estimate for {key}: {str(facts.get('error'))[:200]}", file=sys.stderr)

    want = lambda k: kinds is None or k in kinds  # noqa: E731
    for p in points:
        key = _key(p)
        if key not in out and want("matmul"):
            dt = getattr(jnp, p["dtype"])
            run(
                key,
                kernel_fn(p["kernel"], p["bm"], p["bk"], p["bn"]),
                [((p["n"], p["n"]), dt)] * 2,
                p["chip"],
            )
    for p in cal:
        if not want(p["kernel"]):
            continue
        if p["kernel"] == "xla_attention":
            b, s, h, d = p["shape"]
            run(_key(p), _attention(p["causal"]), [((b, s, h, d), jnp.bfloat16)] * 3, p["chip"])
        elif p["kernel"] == "splash":
            b, s, h, d = p["shape"]
            run(
                _key(p),
                _splash(b, s, h, d, p["causal"], p["blocks"]),
                [((b, h, s, d), jnp.bfloat16)] * 3,
                p["chip"],
            )
        else:
            n, h, v = p["shape"]
            shapes = [((n, h), jnp.bfloat16), ((h, v), jnp.bfloat16), ((n,), jnp.int32)]
            run(_key(p), _xent, shapes, p["chip"])
    for name, (shapes, donate) in {**XLA_PROGRAMS, **KV_PROGRAMS}.items():
        for chip in XLA_PROGRAM_CHIPS:
            key = f"{chip}|xla_program|{name}"
            if want("xla_program") or want(name) or want(key):
                typed = [(s, getattr(jnp, d)) for s, d in shapes]
                run(key, _xla_program(name), typed, chip, donate)
    return out


def _key(p: dict) -> str:
    if "bm" in p:
        return f"{p['chip']}|{p['kernel']}|{p['dtype']}|{p['n']}|{p['bm']}|{p['bk']}|{p['bn']}"
    return f"{p['chip']}|{p['kernel']}|{p['shape']}|{p['causal']}"


def side(p: dict) -> str:
    """'kernel' (a pallas_call: the docs' matmuls, splash) or 'XLA' (a plain-JAX program)."""
    return "kernel" if "bm" in p or p["kernel"] == "splash" else "XLA"


def estimate_at_rev(rev: str, data: str, only: str | None = None) -> dict:
    """estimate_all run by this script in a child whose `maxkernel` is `git archive rev` (its venv's jax)."""
    tree = Path(tempfile.mkdtemp(prefix="mk-fidelity-rev-"))
    src = tree / "src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    shim = tree / "shim"
    shim.mkdir()
    (shim / "maxkernel").symlink_to(src)
    out = tree / "estimates.json"
    env = dict(os.environ, PYTHONPATH=str(shim))
    cmd = [sys.executable, __file__, "--data", data, "--emit", str(out)] + (["--only", only] if only else [])
    subprocess.run(cmd, env=env, check=True)
    return json.loads(out.read_text())


def dispatch_floor_ms(points: list[dict], col: str) -> float:
    """Median of measured - estimate over the docs' points whose kernel runs in 2 grid steps or fewer."""
    tiny = [
        p["measured_ms"] - p[col] / 1e3
        for p in points
        if p.get(col) is not None
        and "bm" in p
        and (p["n"] // p["bm"]) * (p["n"] // p["bn"]) * (p["n"] // p["bk"]) <= 2
    ]
    return statistics.median(tiny) if tiny else 0.1


def series_stats(pts: list[dict], col: str, floor_ms: float, pick: bool) -> dict:
    """Spearman, estimate/measured ratios, pick-loss (only where the points are configs of one problem)."""
    pts = [p for p in pts if p.get(col) is not None]
    est = [p[col] / 1e3 + floor_ms for p in pts]
    meas = [p["measured_ms"] for p in pts]
    ratios = [e / m for e, m in zip(est, meas, strict=True)]
    best = min(range(len(est)), key=lambda i: est[i]) if est and pick else None
    loss = meas[best] / min(meas) - 1 if best is not None else None
    return {"spearman": spearman(est, meas), "ratios": ratios, "pick_loss": loss}


def _source_name(url: str) -> str:
    """'docs.jax.dev matmul' or 'openxla/tokamax': short and distinct."""
    parts = url.split("/")
    if "github.com" in url:
        return f"{parts[3]} {parts[-1].split('_')[-1].split('.')[0]}"
    if "@" in url:
        return url.split("@")[0]
    return f"{parts[2]} {parts[-1].split('.')[0]}"


def _fmt(st: dict) -> str:
    rho = "-" if st["spearman"] is None else f"{st['spearman']:.2f}"
    rr = f"{min(st['ratios']):.2f}-{max(st['ratios']):.2f}" if st["ratios"] else "-"
    loss = "-" if st["pick_loss"] is None else f"{st['pick_loss']:.0%}"
    return f"{rho:>5} {rr:>9} {loss:>6}"


def _side_summary(pts: list[dict], col: str) -> dict:
    """Within [0.8, 1.25], Spearman and the median estimate/measured ratio of one side's points with a
    published time (timeit points with the floor)."""
    have = [p for p in pts if p.get(col) is not None and p.get("measured_ms") is not None]
    est = [p[col] / 1e3 + p.get("_floor_" + col, 0.0) for p in have]
    meas = [p["measured_ms"] for p in have]
    ratios = [e / m for e, m in zip(est, meas, strict=True)]
    return {
        "n": len(have),
        "in_band": sum(0.8 <= r <= 1.25 for r in ratios),
        "spearman": spearman(est, meas),
        "median_ratio": statistics.median(ratios) if ratios else None,
    }


def _picks(cal: list[dict], col: str) -> tuple[int, int, list[str]]:
    """Kernel vs XLA on the same problem (splash vs einsum+softmax at one shape): does the estimate pick the
    implementation the chip found faster? (right, pairs, lines)."""
    by = {}
    for p in cal:
        if p["kernel"] in ("splash", "xla_attention"):
            by.setdefault((p["chip"], str(p["shape"]), p["causal"]), {})[p["kernel"]] = p
    right, n, lines = 0, 0, []
    for (chip, shape, causal), pair in sorted(by.items()):
        k, x = pair.get("splash"), pair.get("xla_attention")
        if k is None or x is None or k.get(col) is None or x.get(col) is None:
            continue
        n += 1
        ok = (k[col] < x[col]) == (k["measured_ms"] < x["measured_ms"])
        right += ok
        lines.append(
            f"{chip} {shape} causal={causal}: kernel {k[col] / 1e3:.3g} vs XLA {x[col] / 1e3:.3g} ms estimated, "
            f"{k['measured_ms']:.3g} vs {x['measured_ms']:.3g} published: {'right' if ok else 'WRONG'}"
        )
    return right, n, lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / "benchmarks" / "data"))
    ap.add_argument("--calibration", default=str(CALIBRATION))
    ap.add_argument("--before", default="main", help="git revision whose estimator is the `before` column")
    ap.add_argument(
        "--before-json", help="the before column's estimates from an earlier --emit (skips that run)"
    )
    ap.add_argument("--json", help="write every point and series figure here")
    ap.add_argument(
        "--only",
        help="comma-separated point kinds (matmul, xla_attention, xla_xent, splash, xla_program) or XLA program "
        "names (kv_scatter_paged, ...): a reduced run of just those; the summaries then cover only them",
    )
    ap.add_argument("--emit", help=argparse.SUPPRESS)  # child mode: estimates of this process's tree, as JSON
    args = ap.parse_args(argv)
    points = load_points(Path(args.data))
    cal = calibration_points(Path(args.calibration)) if Path(args.calibration).is_file() else []
    kinds = set(args.only.split(",")) if args.only else None
    if kinds is not None:
        points = [p for p in points if "matmul" in kinds]
        cal = [p for p in cal if p["kernel"] in kinds]
    if args.emit:
        Path(args.emit).write_text(json.dumps(estimate_all(points, cal, kinds)))
        return 0
    import time

    t0 = time.perf_counter()
    before = (
        json.loads(Path(args.before_json).read_text())
        if args.before_json
        else estimate_at_rev(args.before, args.data, args.only)
    )
    t1 = time.perf_counter()
    after = estimate_all(points, cal, kinds)
    t2 = time.perf_counter()
    allp = points + cal
    for p in allp:
        k = _key(p)
        p["before_us"] = before.get(k, {}).get("us")
        p["after_us"] = after.get(k, {}).get("us")
        p["before_tier"] = before.get(k, {}).get("tier")
        p["after_tier"] = after.get(k, {}).get("tier")
        p["after_fallbacks"] = after.get(k, {}).get("fallbacks")
    cols = ("before_us", "after_us")
    floors = {c: dispatch_floor_ms(points, c) for c in cols}
    for p in points:
        for c in cols:
            p["_floor_" + c] = floors[c]
    print(
        f"{len(allp)} published points; before = {args.before}'s estimator ({t1 - t0:.0f} s), after = this tree ({t2 - t1:.0f} s)"
    )
    print("host dispatch floor added to the docs' timeit points: "
          + ", ".join(f"{c[:-3]} {floors[c] * 1e3:.0f} us" for c in cols) + " (from their 2-step kernels); xprof rows: none")  # fmt: skip
    series: dict[tuple, list[dict]] = {}
    for p in allp:
        what = (
            p["dtype"] + f" n={p['n']}"
            if "bm" in p
            else p["kernel"] + (" (fitted)" if p["fitted"] else " (held out)")
        )
        series.setdefault((p["chip"], _source_name(p["source"]), what), []).append(p)
    head = f"{'chip':<8} {'series':<40} {'pts':>3} {'fastest':>8} | " + " | ".join(
        f"{c[:-3]:^22}" for c in cols
    )
    print(head + "\n" + " " * 64 + " | ".join(f"{'rho':>5} {'ratios':>9} {'loss':>6}" for _ in cols))
    summary: dict[str, dict] = {}
    out = []
    for key, pts in sorted(series.items()):
        fastest = min(p["measured_ms"] for p in pts)
        configs = "bm" in pts[0]  # one problem, several configs: a pick among them means something
        rec = {"series": list(key), "fastest_ms": fastest, "points": len(pts)}
        cells = []
        for c in cols:
            floor = floors[c] if configs else 0.0
            st = series_stats(pts, c, floor, pick=configs)
            rec[c] = st
            cells.append(_fmt(st))
            if (fastest >= 0.5 or not configs) and st["ratios"]:
                s = summary.setdefault(
                    f"{key[0]} {c[:-3]}", {"in_band": 0, "n": 0, "rhos": [], "max_loss": 0.0}
                )
                s["n"] += len(st["ratios"])
                s["in_band"] += sum(0.8 <= r <= 1.25 for r in st["ratios"])
                if st["spearman"] is not None:
                    s["rhos"].append(round(st["spearman"], 2))
                s["max_loss"] = max(s["max_loss"], st["pick_loss"] or 0.0)
        out.append(rec)
        print(
            f"{key[0]:<8} {(key[1][:18] + ' ' + key[2])[:40]:<40} {len(pts):>3} {fastest:>7.3g}m | "
            + " | ".join(cells)
        )
    print("\nper chip (docs series whose fastest point is >= 0.5 ms, every xprof row): within [0.8,1.25], "
          "Spearman per series, worst pick-loss")  # fmt: skip
    for name, s in sorted(summary.items()):
        frac = s["in_band"] / s["n"] if s["n"] else 0.0
        print(
            f"  {name:<16} within {s['in_band']}/{s['n']} ({frac:.0%}), rho {s['rhos']}, worst pick-loss {s['max_loss']:.0%}"
        )
    sides: dict[str, dict] = {}
    print(
        "\nestimate fidelity, kernel side (pallas_calls) and XLA side (plain JAX) apart, every point with a "
        "published time: within [0.8,1.25], Spearman, median estimate/measured"
    )
    for sd in ("kernel", "XLA"):
        pts = [p for p in allp if side(p) == sd]
        for c in cols:
            st = sides[f"{sd} {c[:-3]}"] = _side_summary(pts, c)
            rho = "-" if st["spearman"] is None else f"{st['spearman']:.2f}"
            med = "-" if st["median_ratio"] is None else f"{st['median_ratio']:.2f}"
            print(
                f"  {sd:<6} {c[:-3]:<6} within {st['in_band']}/{st['n']}, Spearman {rho}, median ratio {med}"
            )
    print("\npick agreement (kernel vs XLA on one problem, the faster one by the estimate vs by the chip):")
    picks = {}
    for c in cols:
        right, n, lines = _picks(cal, c)
        picks[c[:-3]] = {"right": right, "pairs": n, "lines": lines}
        print(f"  {c[:-3]}: {right}/{n}")
        for ln in lines:
            print("    " + ln)
    print("\nXLA-side tier of every plain-JAX program (before -> after; after's model-tier ops, if any):")
    programs = [_key(p) for p in allp if side(p) == "XLA"]
    programs += [k for k in sorted(set(after) | set(before)) if "|xla_program|" in k]
    tiers = []
    for key in programs:
        b, a = before.get(key, {}), after.get(key, {})
        falls = a.get("fallbacks") or []
        us = lambda r: f"{r['us']:.4g} us" if r.get("us") is not None else "-"  # noqa: E731
        line = f"  {key:<58} {b.get('tier', '-'):>5} {us(b):>12} -> {a.get('tier', '-'):>5} {us(a):>12}"
        if falls:
            line += f"; {len(falls)} fell back: {falls[0]}"
        print(line)
        tiers.append({"key": key, "before": b, "after": a})
    print(
        "\nKV-cache updates (XLA side, no published time): the estimate beside a first-principles BOUND (the "
        "bytes the update must touch at the chip's HBM peak, no launch or DMA latency; a floor, not a measurement)"
    )
    kv = []
    for name in KV_PROGRAMS:
        for chip in XLA_PROGRAM_CHIPS:
            key = f"{chip}|xla_program|{name}"
            b, a = before.get(key, {}).get("us"), after.get(key, {}).get("us")
            if b is None and a is None:
                continue
            bound = kv_bound_us(name, chip)
            cell = lambda v, b=bound: "-" if v is None else f"{v:.4g} us ({v / b:.1f}x)"  # noqa: E731
            print(
                f"  {chip:<8} {name:<29} bound {bound:8.3g} us ({kv_touched_bytes(name) / 1e6:.3g} MB) | before "
                f"{cell(b):>20} -> after {cell(a):>20}"
            )
            kv.append({"key": key, "bound_us": bound, "touched_bytes": kv_touched_bytes(name), "before_us": b,
                       "after_us": a})  # fmt: skip
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "floors_ms": floors,
                    "series": out,
                    "summary": summary,
                    "sides": sides,
                    "picks": picks,
                    "tiers": tiers,
                    "kv_cache": kv,
                    "points": allp,
                },
                indent=1,
            )  # fmt: skip
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
