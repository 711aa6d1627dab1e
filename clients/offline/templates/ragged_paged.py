"""Ragged paged attention (vLLM's mixed prefill + decode step), from a traced program.

The reference packs every sequence's query tokens along one axis (sequence i's rows cu[i] .. cu[i+1]-1) and
reads each one's keys and values from a paged cache [pages, page, 2·Hkv, D] (kv head h's K at combined
head 2h, its V at 2h+1) through a page table [S, P]. Traced, it is one attention block per sequence slot of
the size's batch layout, scatter-added into zeros: 7 blocks at 7p's small size, 56 at full, so the program's
structure changes with size and no size-generic rewrite of its equations exists. What does not change is
what each block computes, and that is what this template writes: one Pallas kernel over the packed tokens
that reads the layout (cu, kv lengths, table, sequence count) as values, so one module serves every layout.

Recognised (`recognise`), from the equations: the output, the query input's shape and dtype, built as
zeros plus one scatter-add per block; block i reads slots i and i+1 of the cu vector, slot i of the
lengths and row i of the table, and the sequence count; its two contractions read the cache's even
combined heads (scores) and odd ones (p·v), both gathered from the cache, through a softmax (exp); its
queries are grouped [.., Hkv, Hq/Hkv, D] (query head h = kv head · G + g); its score scale is the literal
multiplying the first contraction. The mask (bottom-right-aligned causal within each sequence's kv length)
is the template's reading of the form, not checked here: the judge's validation is the verdict.

Anything else returns None and the other templates are tried.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from typing import Any

from maxkernel.clients.offline.dims import target_size
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.clients.offline.templates.flash_program import Graph, lit_value
from maxkernel.tpu_tools.problem.emit import Program

TOKENS = (64, 128, 256)  # packed tokens a grid step
PAGES = (16, 32, 64, 128)  # pages a step DMAs per sequence, whole
CHUNK_ROWS = (128, 256, 512)  # query rows (tokens x G query heads) one dot takes
_LAYOUT = ("transpose", "reshape", "convert_element_type", "squeeze", "broadcast_in_dim")

SOURCE = '''"""Ragged paged attention (offline template `ragged_paged`), from the reference's traced program.

The packed query tokens are cut into blocks of TOKENS_PER_BLOCK (grid axis, "parallel": blocks are
independent). A block walks the sequences its tokens belong to (their range found from cu outside the
kernel, scalar-prefetched with the lengths and the page table); for each, it DMAs the sequence's pages
whole (every combined head at once, PAGES_PER_BLOCK pages a slot, two slots: the next slot's pages in
flight while this one computes) only up to the last kv position the block's rows see, splits each kv
head's K and V out of the pages' packed bf16 words (K at even combined heads, V at odd: one 32-bit word
holds both), and runs an online softmax (f32 running max, sum and accumulator in VMEM scratch) over the
block's query rows of that sequence in chunks of CHUNK_ROWS rows (tokens x the G query heads of one kv
head). A row sees kv position p when p < kv_len and p <= kv_len - q_len + its place in the sequence
(bottom-right aligned causal); rows past the last live sequence are zeros.

Shape-generic: every shape is read from the inputs when the kernel is traced, and the batch layout is read
from the inputs' values, not the size; the blocks were chosen for the target size (${target}) and clamp.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
TOKENS_PER_BLOCK = ${tokens_per_block}
PAGES_PER_BLOCK = ${pages_per_block}
CHUNK_ROWS = ${chunk_rows}
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}
SCALE = ${scale}  # the reference's score scale
MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)  # a score no row sees: finite, so a row with none stays finite


def _kernel(lens, tbl, cu, lo, hi, q_ref, kv_hbm, o_ref, buf, sem, m_ref, l_ref, acc_ref, *, tq, ppb, pps, g, ch):
    b = pl.program_id(0)
    row0 = b * tq
    n_kv_heads, page = q_ref.shape[0], kv_hbm.shape[1]
    rows = ch * g  # a chunk: ch tokens x the g query heads of one kv head
    o_ref[...] = jnp.zeros_like(o_ref)

    def sequence(s, carry):
        qs, qe, kvl = cu[s], cu[s + 1], lens[s]
        ql = qe - qs
        r_lo = jnp.maximum(qs, row0) - row0  # the block's tokens of sequence s: [r_lo, r_hi)
        r_hi = jnp.minimum(qe, row0 + tq) - row0
        c_lo, c_hi = r_lo // ch, (r_hi + ch - 1) // ch
        n_kv = kvl - (qe - (row0 + r_hi))  # kv positions the block's last row of s sees
        n_pg = (n_kv + page - 1) // page
        n_kb = (n_pg + ppb - 1) // ppb

        def copies(kb, slot):  # pages past the last one needed fetch the last one again
            return [
                pltpu.make_async_copy(
                    kv_hbm.at[tbl[s * pps + jnp.minimum(kb * ppb + i, n_pg - 1)]], buf.at[slot, i], sem.at[slot]
                )
                for i in range(ppb)
            ]

        def init(c, carry):
            r = pl.multiple_of(c * rows, rows)
            m_ref[:, pl.ds(r, rows), :] = jnp.full((n_kv_heads, rows, 1), -jnp.inf, jnp.float32)
            l_ref[:, pl.ds(r, rows), :] = jnp.zeros((n_kv_heads, rows, 1), jnp.float32)
            acc_ref[:, pl.ds(r, rows), :] = jnp.zeros((n_kv_heads, rows, acc_ref.shape[-1]), jnp.float32)
            return carry

        lax.fori_loop(c_lo, c_hi, init, 0)

        @pl.when(n_kb > 0)
        def _first():
            for c in copies(0, 0):
                c.start()

        def kv_block(kb, carry):
            slot = kb % 2

            @pl.when(kb + 1 < n_kb)
            def _ahead():
                for c in copies(kb + 1, 1 - slot):
                    c.start()

            # one wait for the slot's whole block: all its pages' bytes on the semaphore
            pltpu.make_async_copy(kv_hbm.at[pl.ds(0, ppb)], buf.at[slot], sem.at[slot]).wait()
            x = buf[slot]
            x = x.reshape(-1, x.shape[-1])  # [(token, combined head) rows, D]
            # bf16 rows 2h (K) and 2h+1 (V) share one 32-bit word: K in its low half, V in its high half
            w = pltpu.bitcast(x, jnp.uint32).reshape(ppb * page, n_kv_heads, x.shape[-1])
            cols = kb * ppb * page + lax.broadcasted_iota(jnp.int32, (1, ppb * page), 1)
            for h in range(n_kv_heads):
                wh = w[:, h, :]
                k = pltpu.bitcast(wh << 16, jnp.float32).astype(x.dtype)
                v = pltpu.bitcast(wh & jnp.uint32(0xFFFF0000), jnp.float32).astype(x.dtype)

                def chunk(c, carry, h=h, k=k, v=v):
                    r = pl.multiple_of(c * rows, rows)
                    sc = lax.dot_general(
                        q_ref[h, pl.ds(r, rows), :], k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32
                    ) * SCALE
                    t = row0 + c * ch - qs + lax.broadcasted_iota(jnp.int32, (rows, 1), 0) // g  # place in s
                    sc = jnp.where(cols <= jnp.minimum(kvl - ql + t, kvl - 1), sc, MASKED)
                    m_prev = m_ref[h, pl.ds(r, rows), :]
                    m_new = jnp.maximum(m_prev, jnp.max(sc, axis=-1, keepdims=True))
                    alpha = jnp.exp(m_prev - m_new)
                    p = jnp.exp(sc - m_new)
                    l_ref[h, pl.ds(r, rows), :] = alpha * l_ref[h, pl.ds(r, rows), :] + jnp.sum(p, -1, keepdims=True)
                    pv = lax.dot_general(p.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
                    acc_ref[h, pl.ds(r, rows), :] = alpha * acc_ref[h, pl.ds(r, rows), :] + pv
                    m_ref[h, pl.ds(r, rows), :] = m_new
                    return carry

                lax.fori_loop(c_lo, c_hi, chunk, 0)
            return carry

        lax.fori_loop(0, n_kb, kv_block, 0)

        def store(c, carry):  # only sequence s's rows of the chunk; the others keep what they hold
            r = pl.multiple_of(c * rows, rows)
            t = row0 + c * ch + lax.broadcasted_iota(jnp.int32, (rows, 1), 0) // g
            mine = (t >= qs) & (t < qe)
            for h in range(n_kv_heads):
                out = (acc_ref[h, pl.ds(r, rows), :] / l_ref[h, pl.ds(r, rows), :]).astype(o_ref.dtype)
                o_ref[h, pl.ds(r, rows), :] = jnp.where(mine, out, o_ref[h, pl.ds(r, rows), :])
            return carry

        lax.fori_loop(c_lo, c_hi, store, 0)
        return carry

    lax.fori_loop(lo[b], hi[b], sequence, 0)


def workload(${args}):
    q, kv, kv_lens, table, cu, num_seqs = ${q}, ${kv}, ${lens}, ${table}, ${cu}, ${count}
    n_tok, hq, d = q.shape
    n_pages, page, combined, _ = kv.shape
    hkv = combined // 2
    g = hq // hkv  # query head h reads kv head h // g
    n_slots, pps = table.shape
    unit = 16 // math.gcd(g, 16)  # a chunk's rows (ch tokens x g heads) fill whole bf16 tiles
    ch = unit * max(1, CHUNK_ROWS // (unit * g))
    tq = max(ch, min(TOKENS_PER_BLOCK // ch * ch, pl.cdiv(n_tok, ch) * ch))
    nb = pl.cdiv(n_tok, tq)
    # [Hkv, tokens x G, D]: a kv head's query rows, (token, g) pairs, contiguous
    qh = jnp.transpose(q.reshape(n_tok, hkv, g, d), (1, 0, 2, 3)).reshape(hkv, n_tok * g, d)
    qh = jnp.pad(qh, ((0, 0), (0, (nb * tq - n_tok) * g), (0, 0)))
    live = jnp.clip(num_seqs[0], 0, n_slots)
    starts = jnp.arange(nb, dtype=jnp.int32) * tq
    # a block's sequences: [those ended before it, those begun before its end), live ones only
    hi = jnp.minimum(jnp.sum(cu[:-1][None, :] < (starts + tq)[:, None], axis=1), live).astype(jnp.int32)
    lo = jnp.minimum(jnp.sum(cu[1:][None, :] <= starts[:, None], axis=1), hi).astype(jnp.int32)
    ppb = min(PAGES_PER_BLOCK, pps)
    kernel = functools.partial(_kernel, tq=tq, ppb=ppb, pps=pps, g=g, ch=ch)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=5,
        grid=(nb,),
        in_specs=[
            pl.BlockSpec((hkv, tq * g, d), lambda b, *_: (0, b, 0)),
            pl.BlockSpec(memory_space=pl.ANY),  # the cache stays in HBM: pages are DMA'd by the kernel
        ],
        out_specs=pl.BlockSpec((hkv, tq * g, d), lambda b, *_: (0, b, 0)),
        scratch_shapes=[
            pltpu.VMEM((2, ppb, page, combined, d), kv.dtype),  # two slots of whole pages
            pltpu.SemaphoreType.DMA((2,)),
            pltpu.VMEM((hkv, tq * g, 1), jnp.float32),  # running max per query row
            pltpu.VMEM((hkv, tq * g, 1), jnp.float32),  # running sum
            pltpu.VMEM((hkv, tq * g, d), jnp.float32),  # unnormalised output
        ],
    )
    out = pl.pallas_call(
        kernel,
        grid_spec=grid_spec,
        out_shape=jax.ShapeDtypeStruct((hkv, nb * tq * g, d), q.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",), vmem_limit_bytes=VMEM_LIMIT_BYTES),
        interpret=False,
        name="offline_ragged_paged_attention",
    )(
        jnp.clip(kv_lens, 0, pps * page).astype(jnp.int32),
        jnp.clip(table, 0, n_pages - 1).reshape(-1).astype(jnp.int32),  # flat: a page's DMA reads one SMEM word
        cu.astype(jnp.int32), lo, hi, qh, kv,
    )
    out = out[:, : n_tok * g].reshape(hkv, n_tok, g, d)
    return jnp.transpose(out, (1, 0, 2, 3)).reshape(n_tok, hq, d)
'''


def _params(e: dict[str, Any], key: str) -> Any:
    text = e["params"].get(key, "None")
    return None if text == "None" else ast.literal_eval(text)


def _through_layout(g: Graph, name: str) -> str:
    """The value under a chain of layout ops (transpose, reshape, convert, squeeze, broadcast)."""
    while name in g.producer and g.eqns[g.producer[name]]["primitive"] in _LAYOUT:
        name = g.eqns[g.producer[name]]["inputs"][0]
    return name


def _half(g: Graph, operand: str, kv: str, combined: int) -> int | None:
    """Which half (0: even combined heads, 1: odd) of the cache `operand` is: a stride-2 slice over the
    combined-head axis of a value gathered from `kv`; else None."""
    name = _through_layout(g, operand)
    if name not in g.producer:
        return None
    e = g.eqns[g.producer[name]]
    strides, starts = _params(e, "strides"), _params(e, "start_indices")
    if e["primitive"] != "slice" or strides is None:
        return None
    axes = [a for a, st in enumerate(strides) if st != 1]
    if len(axes) != 1 or strides[axes[0]] != 2 or g.shape(e["inputs"][0])[axes[0]] != combined:
        return None
    gathers = [i for i in g.ancestors(e["inputs"][0]) if g.eqns[i]["primitive"] == "gather"]
    if not any(g.eqns[i]["inputs"][0] == kv for i in gathers):
        return None
    return int(starts[axes[0]])


def _slices(g: Graph, eqns: set[int], vec: str) -> set[tuple[int, ...]]:
    """The start indices of every static slice of input `vec` among `eqns`."""
    return {
        tuple(_params(g.eqns[i], "start_indices"))
        for i in eqns
        if g.eqns[i]["primitive"] == "slice" and g.eqns[i]["inputs"][0] == vec
    }


def _scale(g: Graph, dot: int) -> float:
    """The literal the scores are multiplied by (1.0 where none is), following the first dot's output."""
    name = g.eqns[dot]["outputs"][0]
    while True:
        users = g.users.get(name, [])
        if len(users) != 1:
            return 1.0
        e = g.eqns[users[0]]
        if e["primitive"] in _LAYOUT:
            name = e["outputs"][0]
            continue
        lits = [a for a in e["inputs"] if a.startswith("lit:")]
        if e["primitive"] == "mul" and len(lits) == 1:
            return float(lit_value(lits[0]))
        if e["primitive"] == "div" and e["inputs"][1].startswith("lit:"):
            return 1.0 / float(lit_value(e["inputs"][1]))
        return 1.0


def recognise(program: Program) -> dict[str, Any] | None:
    """The roles (query, cache, lengths, table, cu, count, scale) of a ragged paged attention, else None."""
    g = Graph(program)
    names = list(program["input_names"])
    spec = dict(zip(names, program["inputs"], strict=True))
    floats = [n for n in names if "float" in spec[n]["dtype"]]
    ints = [n for n in names if "int" in spec[n]["dtype"]]
    if len(floats) != 2 or len(ints) != 4 or len(program["outputs"]) != 1:
        return None
    by_rank = {len(spec[n]["shape"]): n for n in floats}
    if set(by_rank) != {3, 4}:
        return None
    q, kv = by_rank[3], by_rank[4]
    _, hq, d = spec[q]["shape"]
    _, _, combined, dk = spec[kv]["shape"]
    if dk != d or combined % 2 or hq % (combined // 2) or spec[q]["dtype"] != spec[kv]["dtype"]:
        return None
    if spec[kv]["dtype"] != "bfloat16":
        return None  # K and V split out of one 32-bit word: a bf16 cache
    hkv = combined // 2
    tables = [n for n in ints if len(spec[n]["shape"]) == 2]
    vecs = {spec[n]["shape"][0]: n for n in ints if len(spec[n]["shape"]) == 1}
    if len(tables) != 1:
        return None
    slots = spec[tables[0]]["shape"][0]
    if slots < 2 or set(vecs) != {1, slots, slots + 1}:
        return None  # one slot: the lengths and the count could not be told apart
    lens, cu, count, table = vecs[slots], vecs[slots + 1], vecs[1], tables[0]
    out = program["outputs"][0]
    if (
        program["out_specs"][0]["shape"] != spec[q]["shape"]
        or program["out_specs"][0]["dtype"] != spec[q]["dtype"]
    ):
        return None
    chain, name = [], out
    while name in g.producer and g.eqns[g.producer[name]]["primitive"] == "scatter-add":
        chain.append(g.producer[name])
        name = g.eqns[g.producer[name]]["inputs"][0]
    if not chain or len(chain) > slots or name not in g.producer:
        return None
    zero = g.eqns[g.producer[name]]
    if zero["primitive"] != "broadcast_in_dim" or not zero["inputs"][0].startswith("lit:"):
        return None
    if lit_value(zero["inputs"][0]) != 0:
        return None
    scale = None
    for i, idx in enumerate(reversed(chain)):  # block i: sequence slot i
        e = g.eqns[idx]
        anc = set().union(*(g.ancestors(a) for a in e["inputs"][1:] if not a.startswith("lit:")))
        dots = sorted(j for j in anc if g.eqns[j]["primitive"] == "dot_general")
        if len(dots) != 2 or not any(g.eqns[j]["primitive"] == "exp" for j in anc):
            return None
        d1, d2 = dots
        scores = {a: _half(g, a, kv, combined) for a in g.eqns[d1]["inputs"]}
        if sorted(h for h in scores.values() if h is not None) != [0]:
            return None
        if sorted(h for a in g.eqns[d2]["inputs"] if (h := _half(g, a, kv, combined)) is not None) != [1]:
            return None
        q_side = [a for a, h in scores.items() if h is None]
        grouped = [
            j
            for a in q_side
            for j in g.ancestors(a) | ({g.producer[a]} if a in g.producer else set())
            if g.eqns[j]["primitive"] == "reshape"
            and g.shape(g.eqns[j]["outputs"][0])[-3:] == [hkv, hq // hkv, d]
        ]
        if not grouped or not any(q in g.eqns[j]["inputs"] for a in q_side for j in g.ancestors(a)):
            return None  # queries grouped (kv head, g): query head h reads kv head h // g
        if _slices(g, anc, cu) != {(i,), (i + 1,)} or _slices(g, anc, lens) != {(i,)}:
            return None
        if _slices(g, anc, table) != {(i, 0)} or not any(count in g.eqns[j]["inputs"] for j in anc):
            return None
        s = _scale(g, d1)
        if scale is not None and not math.isclose(s, scale, rel_tol=1e-6):
            return None
        scale = s
    return {"q": q, "kv": kv, "lens": lens, "table": table, "cu": cu, "count": count, "scale": scale,
            "blocks": len(chain)}  # fmt: skip


def build(program: Program) -> tuple[Template, str, dict[str, int]] | None:
    """(the ragged paged template, the target size, no dims) for a ragged paged attention, else None."""
    r = recognise(program)
    if r is None:
        return None
    # sizes whose traced structure differs count too: this template writes none of the trace's equations
    target = target_size(program, mismatched=True)
    inputs = program["inputs"] if target == program.get("size") else program["variants"][target]["inputs"]
    spec = dict(zip(program["input_names"], inputs, strict=True))
    n_tok, hq, d = spec[r["q"]]["shape"]
    _, page, combined, _ = spec[r["kv"]]["shape"]
    slots, pps = spec[r["table"]]["shape"]
    hkv = combined // 2
    g = hq // hkv

    def vmem(c: Mapping[str, Any], _: Mapping[str, int]) -> int:
        tq, ppb, cr = int(c["tokens_per_block"]), min(int(c["pages_per_block"]), pps), int(c["chunk_rows"])
        pages = 2 * ppb * page * combined * d * 2  # two slots of whole bf16 pages
        rows = hkv * tq * g
        blocks = 2 * 2 * rows * d * 2  # q and the output, two buffers each
        state = rows * d * 4 + 2 * rows * 128 * 4  # accumulator, max and sum (lane-padded)
        return pages + blocks + state + 3 * cr * ppb * page * 4  # scores and probabilities, f32

    def cost(c: Mapping[str, Any], _: Mapping[str, int]) -> float:
        """Bundles fitted on v6e's llo (7p at full, six configs): ~350 a page to split K and V; a chunk ~100,
        ~24 a page (the MXU takes each kv head's K and V anew) and ~3.2 a 1024 score elements in the softmax.
        Over a layout the shapes alone suggest: each block's tokens in 1 + S·tq/T sequences, each reading
        half its table. It orders proposals; the estimate scores them."""
        tq, ppb, cr = int(c["tokens_per_block"]), min(int(c["pages_per_block"]), pps), int(c["chunk_rows"])
        seqs = 1 + slots * tq / n_tok
        kv_blocks = math.ceil(pps / 2 / ppb)
        chunks = max(1.0, tq * g / cr / seqs)
        per_block = 350 * ppb + hkv * chunks * (100 + 23.8 * ppb + 3.23 * cr * ppb * page / 1024)
        bundles = math.ceil(n_tok / tq) * (seqs * kv_blocks * per_block + 2000)
        return bundles / 1751.0 + (1e6 if vmem(c, {}) > 48 * MiB else 0.0)

    def problems(c: Mapping[str, Any], _: Mapping[str, int]) -> list[str]:
        out = []
        for key, values in (
            ("tokens_per_block", TOKENS),
            ("pages_per_block", PAGES),
            ("chunk_rows", CHUNK_ROWS),
        ):
            if c[key] not in values:
                out.append(f"{key}={c[key]} is not one of {list(values)}")
        return out

    configs = [
        {"tokens_per_block": t, "pages_per_block": p, "chunk_rows": cr}
        for t in TOKENS
        for p in PAGES
        for cr in CHUNK_ROWS
    ]
    first = min(configs, key=lambda c: (cost(c, {}), -c["pages_per_block"]))
    fixed = {
        "args": ", ".join(program["input_names"]),
        **{k: r[k] for k in ("q", "kv", "lens", "table", "cu", "count")},
        "scale": repr(r["scale"]),
        "target": f"{target}: {n_tok} tokens, {hq} query / {hkv} kv heads, {slots} slots of {pps} {page}-token pages",
    }
    template = Template(
        name="ragged_paged",
        operators=("program",),
        source=SOURCE,
        tunables={"tokens_per_block": TOKENS, "pages_per_block": PAGES, "chunk_rows": CHUNK_ROWS},
        dims_of=lambda sizes: {},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial=first,
        fixed=lambda op: fixed,
        constraints=(
            "tokens_per_block: packed query tokens a grid step",
            "pages_per_block: pages a sequence's DMA slot holds (clamped to the table's width)",
            "chunk_rows: query rows (tokens x query heads of a kv head) one dot takes",
        ),
        grid_axes=lambda c: ["token blocks"],
        semantics=lambda c: ["parallel"],
    )
    return template, target, {}
