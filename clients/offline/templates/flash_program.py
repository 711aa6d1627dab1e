"""Attention from a traced program as an online softmax (flash): K/V tiled over the kv axis.

The `attention` class holds the whole score matrix per block, which does not fit VMEM at production
sequence lengths. When the program is plain attention (a first dot_general q·kᵀ, its scores scaled by
a literal and masked by a constant mask that is exactly causal or absent, a softmax over the kv axis,
and a second dot_general p·v), this module recognises the roles of the axes by propagating labels
through the program: the dots' dimension numbers say which axes are batch, contracted and free, the
softmax's reduction says which free axis is kv, the mask's broadcast says which is the query's.
The kernel then brings q, k, v to [N, G, S, D] / [N, S, D] outside the pallas_call (N: the batch axes,
G: the query's extra free axes, e.g. the query heads per kv head in GQA), runs a flash kernel (grid
N, G, q blocks, kv blocks; running max / sum / accumulator in f32 VMEM scratch initialised under
pl.when(kv == 0); kv blocks above the diagonal skipped when causal) and maps the result back through
the reference's own trailing equations. Anything else returns None, and the caller keeps the
whole-score template.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.tpu_tools.problem.emit import Program, body_lines, operand

PASS = {"convert_element_type", "stop_gradient"}  # value-preserving for the axis labels
_MASK_PRIMS = {"iota", "add", "sub", "ge", "gt", "le", "lt", "eq", "ne", "and", "or", "not",
               "select_n", "broadcast_in_dim", "convert_element_type"}  # fmt: skip


def _lit(text: str) -> Any:
    """The value of a literal operand `lit:...` (numbers, bools, jnp.asarray(x, dtype))."""
    body = text[4:]
    if body in ("True", "False"):
        return body == "True"
    if body.startswith("jnp.asarray("):
        inner = body[len("jnp.asarray(") : -1].rsplit(",", 1)[0]
        return float(eval(inner, {"float": float}))  # noqa: S307 - our own traced literal text
    return float(ast.literal_eval(body))


class _Graph:
    def __init__(self, program: Program) -> None:
        self.p = program
        self.eqns = program["equations"]
        self.producer = {o: i for i, e in enumerate(self.eqns) for o in e["outputs"]}
        self.users: dict[str, list[int]] = {}
        for i, e in enumerate(self.eqns):
            for a in e["inputs"]:
                self.users.setdefault(a, []).append(i)

    def shape(self, name: str) -> list[int]:
        if name in self.p["input_names"]:
            return self.p["inputs"][self.p["input_names"].index(name)]["shape"]
        e = self.eqns[self.producer[name]]
        return e["out_specs"][e["outputs"].index(name)]["shape"]

    def ancestors(self, name: str) -> set[int]:
        out, todo = set(), [name]
        while todo:
            n = todo.pop()
            if n in self.producer and self.producer[n] not in out:
                out.add(self.producer[n])
                todo += [a for a in self.eqns[self.producer[n]]["inputs"] if not a.startswith("lit:")]
        return out

    def depends_on_input(self, name: str) -> bool:
        if name in self.p["input_names"]:
            return True
        return any(a in self.p["input_names"] for i in self.ancestors(name) for a in self.eqns[i]["inputs"])

    def evaluate(self, name: str) -> np.ndarray | None:
        """A constant (input-free) value computed with NumPy, or None when it uses another primitive."""
        cache: dict[str, Any] = {}

        def val(n: str) -> Any:
            if n.startswith("lit:"):
                return np.asarray(_lit(n))
            if n in cache:
                return cache[n]
            e = self.eqns[self.producer[n]]
            prim, p = e["primitive"], e["params"]
            if prim not in _MASK_PRIMS:
                raise LookupError(prim)
            shape = tuple(e["out_specs"][0]["shape"])
            if prim == "iota":
                r = np.broadcast_to(
                    np.arange(shape[int(p["dimension"])]).reshape(
                        [-1 if d == int(p["dimension"]) else 1 for d in range(len(shape))]
                    ),
                    shape,
                )
            else:
                args = [val(a) for a in e["inputs"]]
                if prim == "broadcast_in_dim":
                    dims = ast.literal_eval(p["broadcast_dimensions"])
                    x = args[0]
                    r = np.broadcast_to(
                        x.reshape([x.shape[dims.index(d)] if d in dims else 1 for d in range(len(shape))])
                        if x.ndim
                        else x,
                        shape,
                    )
                elif prim == "select_n":
                    r = np.where(args[0].astype(bool), args[2], args[1]) if len(args) == 3 else None
                    if r is None:
                        raise LookupError("select_n arity")
                elif prim == "convert_element_type":
                    r = args[0].astype(bool) if e["out_specs"][0]["dtype"] == "bool" else args[0]
                else:
                    fn = {"add": np.add, "sub": np.subtract, "ge": np.greater_equal, "gt": np.greater,
                          "le": np.less_equal, "lt": np.less, "eq": np.equal, "ne": np.not_equal,
                          "and": np.logical_and, "or": np.logical_or, "not": np.logical_not}[prim]  # fmt: skip
                    r = fn(*args)
            cache[n] = np.asarray(r)
            return cache[n]

        try:
            return val(name)
        except (LookupError, ValueError, TypeError):
            return None


def _trace_back(g: _Graph, name: str) -> tuple[list[int], str] | None:
    """Equations (reshape/transpose/convert only) from a program input to `name`, and that input."""
    chain = []
    while name not in g.p["input_names"]:
        if name not in g.producer:
            return None
        i = g.producer[name]
        e = g.eqns[i]
        if e["primitive"] not in PASS | {"reshape", "transpose", "split", "squeeze"}:
            return None  # split/squeeze: q, k and v cut from one fused qkv projection
        chain.append(i)
        name = e["inputs"][0]
    return sorted(chain), name


def _dims(e: dict) -> tuple[tuple, tuple, tuple, tuple]:
    (lc, rc), (lb, rb) = ast.literal_eval(e["params"]["dimension_numbers"])
    return tuple(lc), tuple(rc), tuple(lb), tuple(rb)


def _dot_labels(e: dict, left: list, right: list, g: _Graph) -> list:
    """The labels of a dot_general's output axes: batch (from the left), left free, right free."""
    lc, rc, lb, rb = _dims(e)
    nl, nr = len(g.shape(e["inputs"][0])), len(g.shape(e["inputs"][1]))
    return (
        [left[a] for a in lb]
        + [left[a] for a in range(nl) if a not in lc + lb]
        + [right[a] for a in range(nr) if a not in rc + rb]
    )


def recognise(program: Program) -> dict[str, Any] | None:
    """The plain-attention roles of `program`, or None when it is anything else."""
    g = _Graph(program)
    eqns = g.eqns
    if len(program["outputs"]) != 1:
        return None
    dots = [i for i, e in enumerate(eqns) if e["primitive"] == "dot_general"]
    if len(dots) != 2:
        return None
    d1, d2 = dots
    e1, e2 = eqns[d1], eqns[d2]
    # roles of the first dot's operands: follow its output to the softmax's reduce_max
    left = [("L", a) for a in range(len(g.shape(e1["inputs"][0])))]
    right = [("R", a) for a in range(len(g.shape(e1["inputs"][1])))]
    lc, rc, lb, rb = _dims(e1)
    if len(lc) != 1:
        return None
    for a, b in zip(lb, rb, strict=True):
        right[b] = left[a] = ("B", a)
    lab = {e1["outputs"][0]: _dot_labels(e1, left, right, g)}
    scale, mask, cur, q_label, bias, ops = None, None, e1["outputs"][0], None, None, []
    while True:  # the score chain: transposes, casts, one literal scale, one input bias, one constant mask
        users = [u for u in g.users.get(cur, []) if u > d1]
        if len(users) == 2 and any(eqns[u]["primitive"] == "reduce_max" for u in users):
            break
        if len(users) != 1:
            return None
        i = users[0]
        e = eqns[i]
        prim, ins = e["primitive"], e["inputs"]
        out = e["outputs"][0]
        if prim == "transpose":
            perm = ast.literal_eval(e["params"]["permutation"])
            lab[out] = [lab[cur][p] for p in perm]
        elif prim in PASS:
            lab[out] = lab[cur]
        elif (
            prim == "mul" and scale is None and len(ins) == 2 and sum(a.startswith("lit:") for a in ins) == 1
        ):
            scale = (i, next(j for j, a in enumerate(ins) if a.startswith("lit:")))
            ops.append("scale")
            lab[out] = lab[cur]
        elif (
            prim == "div" and scale is None and len(ins) == 2 and ins[0] == cur and ins[1].startswith("lit:")
        ):
            scale = (i, 1)  # scores / sqrt(d), as Flax and many users write it
            ops.append("scale_div")
            lab[out] = lab[cur]
        elif prim == "add" and bias is None and len(ins) == 2 and cur in ins and ins[0] != ins[1]:
            other = ins[1 - ins.index(cur)]  # an input broadcast onto the scores (a relative-position bias)
            be = eqns[g.producer[other]] if other in g.producer else None
            if (
                be is None
                or be["primitive"] != "broadcast_in_dim"
                or be["inputs"][0] not in g.p["input_names"]
            ):
                return None
            src = be["inputs"][0]
            bdims = ast.literal_eval(be["params"]["broadcast_dimensions"])
            if [g.shape(src)[a] for a in range(len(bdims))] != [g.shape(cur)[d] for d in bdims]:
                return None  # a size-1 axis broadcast along a score axis: not handled
            if len(g.users.get(other, [])) != 1 or len(g.users.get(src, [])) != 1:
                return None
            bias = {"input": src, "labels": [lab[cur][d] for d in bdims], "eq": g.producer[other]}
            ops.append("bias")
            lab[out] = lab[cur]
        elif prim == "select_n" and mask is None and len(ins) == 3 and ins[2] == cur:
            pred, fill = ins[0], ins[1]
            if g.depends_on_input(pred) or g.depends_on_input(fill):
                return None
            pe = eqns[g.producer[pred]] if pred in g.producer else None
            if pe is None or pe["primitive"] != "broadcast_in_dim":
                return None
            bdims = ast.literal_eval(pe["params"]["broadcast_dimensions"])
            m, f = g.evaluate(pe["inputs"][0]), g.evaluate(fill)
            if m is None or m.ndim != 2 or len(bdims) != 2 or f is None or np.max(f) > -1e4:
                return None  # a fill that is not far below every score would still carry weight
            if not np.array_equal(m.astype(bool), np.tril(np.ones(m.shape, bool))):
                if not m.astype(bool).all():
                    return None
            else:
                mask = "causal"
            q_label = lab[cur][bdims[0]]
            lab[out] = lab[cur]
        else:
            return None
        cur = out
    rmax = next(u for u in g.users[cur] if eqns[u]["primitive"] == "reduce_max")
    axes = ast.literal_eval(eqns[rmax]["params"]["axes"])
    if len(axes) != 1:
        return None
    kv_label = lab[cur][axes[0]]
    # which operand is k: the one whose free axis is kv
    k_side = kv_label[0]
    if k_side not in ("L", "R"):
        return None
    q_side = "R" if k_side == "L" else "L"
    q_op, k_op = (e1["inputs"][1], e1["inputs"][0]) if k_side == "L" else (e1["inputs"][0], e1["inputs"][1])
    qc, kc = (rc[0], lc[0]) if k_side == "L" else (lc[0], rc[0])
    qb, kb = (rb, lb) if k_side == "L" else (lb, rb)
    q_rank, k_rank = len(g.shape(q_op)), len(g.shape(k_op))
    k_free = [a for a in range(k_rank) if a not in (kc, *kb)]
    q_free = [a for a in range(q_rank) if a not in (qc, *qb)]
    if len(k_free) != 1:
        return None
    if q_label is None:
        if len(q_free) != 1:
            return None
        q_label = (q_side, q_free[0])
    if q_label[0] != q_side:
        return None
    q_seq = q_label[1]
    groups = [a for a in q_free if a != q_seq]
    # the second dot: p (the softmax's result) with v
    p_name = next(
        (
            a
            for a in e2["inputs"]
            if a not in program["input_names"]
            and g.producer.get(a, -1) > d1
            and g.producer[a] < d2
            and eqns[g.producer[a]]["primitive"] in PASS | {"div"}
        ),
        None,
    )
    if p_name is None:
        return None
    v_op = next(a for a in e2["inputs"] if a != p_name)
    # does the reference round the normalised probabilities to a narrower dtype before p·v?
    pe = eqns[g.producer[p_name]]
    rounds_normalised = (
        pe["primitive"] == "convert_element_type"
        and pe["out_specs"][0]["dtype"] in ("bfloat16", "float16")
        and pe["inputs"][0] in g.producer
        and eqns[g.producer[pe["inputs"][0]]]["primitive"] == "div"
    )
    pi = e2["inputs"].index(p_name)
    # p's labels: the score labels (after the softmax, same layout as the reduce_max input)
    p_labels = lab[cur]
    if g.shape(p_name) != g.shape(cur):
        return None
    lc2, rc2, lb2, rb2 = _dims(e2)
    pc, vc = (lc2, rc2) if pi == 0 else (rc2, lc2)
    pb, vb = (lb2, rb2) if pi == 0 else (rb2, lb2)
    if len(pc) != 1 or p_labels[pc[0]] != kv_label:
        return None
    v_rank = len(g.shape(v_op))
    v_free = [a for a in range(v_rank) if a not in (*vc, *vb)]
    if len(v_free) != 1:
        return None
    # v's batch axes in the order of the first dot's batch labels
    batch_labels = [("B", a) for a in lb]
    v_batch = []
    for bl in batch_labels:
        if bl not in [p_labels[a] for a in pb]:
            return None
        v_batch.append(vb[[p_labels[a] for a in pb].index(bl)])
    # the second dot's output labels
    vl = [None] * v_rank
    for a, b in zip(pb, vb, strict=True):
        vl[b] = p_labels[a]
    vl[vc[0]] = kv_label
    vl[v_free[0]] = ("V", 0)
    out2 = _dot_labels(e2, p_labels if pi == 0 else vl, vl if pi == 0 else p_labels, g)
    canon = batch_labels + [(q_side, a) for a in groups] + [(q_side, q_seq), ("V", 0)]
    if sorted(map(str, out2)) != sorted(map(str, canon)):
        return None
    # the prefix (input -> operand) and tail (second dot -> output) equations
    prefix: set[int] = set()
    for op in (q_op, k_op, v_op):
        tb = _trace_back(g, op)
        if tb is None:
            return None
        prefix |= set(tb[0])
    tail = sorted(set(range(d2 + 1, len(eqns))))
    out_name = e2["outputs"][0]
    for t in tail:
        e = eqns[t]
        if e["primitive"] not in PASS | {"reshape", "transpose"} or e["inputs"][0] != out_name:
            return None
        out_name = e["outputs"][0]
    if out_name != program["outputs"][0]:
        return None
    bias_out = None
    if bias is not None:
        bl = bias["labels"]
        in_batch = [x for x in bl if x in batch_labels]
        suffix = batch_labels[len(batch_labels) - len(in_batch) :]
        if sorted(map(str, in_batch)) != sorted(map(str, suffix)) or len(bl) != len(in_batch) + 2:
            return None  # the bias must vary over the trailing batch axes only (plus q and kv)
        if (q_side, q_seq) not in bl or kv_label not in bl:
            return None
        perm = [bl.index(x) for x in suffix] + [bl.index((q_side, q_seq)), bl.index(kv_label)]
        bias_out = {"input": bias["input"], "perm": perm}
    used = prefix | set(range(d1, d2 + 1)) | set(tail)
    if any(i not in used for i in range(len(eqns))):
        return None  # an equation outside the recognised pattern
    return {
        "q": q_op, "k": k_op, "v": v_op,
        "q_perm": list(qb) + groups + [q_seq, qc],
        "k_perm": list(kb) + [k_free[0], kc],
        "v_perm": v_batch + [vc[0], v_free[0]],
        "n_batch": len(lb), "n_groups": len(groups),
        "out_perm": [canon.index(x) for x in out2],
        "dot2_out": e2["outputs"][0],
        "prefix": sorted(prefix), "tail": tail,
        "scale": scale, "causal": mask == "causal",
        "score_dtype": e1["out_specs"][0]["dtype"],
        "out_dtype": e2["out_specs"][0]["dtype"],
        "d1": d1, "bias": bias_out, "ops": ops, "two_pass": rounds_normalised,
    }  # fmt: skip


SOURCE = '''"""Attention as an online softmax (offline template `flash_program`), from the reference's traced program.

The reference's q, k, v are brought to [N, G, S, D] / [N, S, D] (N: its batch axes, G: the query's
extra axes per kv head) by its own leading equations and a transpose; the kernel walks kv blocks
innermost ("arbitrary"), keeping the running max, sum and accumulator in f32 VMEM scratch (set under
pl.when(kv == 0)), so no step holds more than a [block_q, block_kv] score tile.${causal_note}
${two_pass_note}
The result goes back to the reference's layout through its own trailing equations.

Shape-generic: every shape is read from the inputs when the kernel is traced; the block sizes were
chosen for the target size (${target}) and clamp to smaller inputs; a partial last block is masked
(kv columns past the sequence never count, and their v rows are zeroed).
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

${config_marker}${config_json}
BLOCK_Q = ${block_q}
BLOCK_KV = ${block_kv}
VMEM_LIMIT_BYTES = ${vmem_limit_bytes}
CAUSAL = ${causal}
TWO_PASS = ${two_pass}  # kv is walked twice: statistics, then the normalised probabilities
PASSES = 2 if TWO_PASS else 1
MASK_VALUE = -1e30  # masked scores: exp() of them is 0 in f32


def _last_kv(qi, block_q, block_kv, nk):
    """The last kv block a q block needs (causal: the diagonal's; else the last)."""
    if not CAUSAL:
        return nk - 1
    return jnp.minimum((qi * block_q + block_q - 1) // block_kv, nk - 1)


def _scores(q_ref, k_ref, ${bias_ref}qi, ki, s_kv):
    """The reference's masked f32 scores of q block qi against kv block ki."""
    block_q, block_kv = q_ref.shape[0], k_ref.shape[0]
    q, k = q_ref[...], k_ref[...]
    s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    s = s.astype(jnp.${score_dtype})  # the reference's score dtype
${scale_line}
    s = s.astype(jnp.float32)
    rows = qi * block_q + lax.broadcasted_iota(jnp.int32, s.shape, 0)
    cols = ki * block_kv + lax.broadcasted_iota(jnp.int32, s.shape, 1)
    keep = cols < s_kv
    if CAUSAL:
        keep = jnp.logical_and(keep, cols <= rows)
    return jnp.where(keep, s, MASK_VALUE)


def _v_block(v_ref, ki, s_kv):
    v = v_ref[...]
    v_rows = ki * v.shape[0] + lax.broadcasted_iota(jnp.int32, (v.shape[0], 1), 0)
    return jnp.where(v_rows < s_kv, v, jnp.zeros_like(v))  # a partial block's rows past the end


def _kernel(q_ref, k_ref, v_ref, ${bias_ref}o_ref, m_ref, l_ref, acc_ref, *, s_kv, nk):
    qi, step = pl.program_id(2), pl.program_id(3)
    ki = step % nk if TWO_PASS else step
    block_q, block_kv = q_ref.shape[0], k_ref.shape[0]
    last = _last_kv(qi, block_q, block_kv, nk)

    @pl.when(step == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    if TWO_PASS:

        @pl.when(jnp.logical_and(step < nk, ki <= last))
        def _statistics():  # pass 1: the row max and the sum of exp(s - max)
            s = _scores(q_ref, k_ref, ${bias_ref}qi, ki, s_kv)
            m_prev = m_ref[...]
            m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
            l_ref[...] = jnp.exp(m_prev - m_new) * l_ref[...] + jnp.sum(jnp.exp(s - m_new), axis=-1, keepdims=True)
            m_ref[...] = m_new

        @pl.when(jnp.logical_and(step >= nk, ki <= last))
        def _weighted():  # pass 2: the normalised probabilities, rounded as the reference rounds them
            s = _scores(q_ref, k_ref, ${bias_ref}qi, ki, s_kv)
            p = jnp.exp(s - m_ref[...]) / l_ref[...]
            v = _v_block(v_ref, ki, s_kv)
            acc_ref[...] += jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)

        @pl.when(step == nk + last)
        def _store():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    else:

        @pl.when(ki <= last)
        def _update():
            s = _scores(q_ref, k_ref, ${bias_ref}qi, ki, s_kv)
            v = _v_block(v_ref, ki, s_kv)
            m_prev = m_ref[...]
            m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
            alpha = jnp.exp(m_prev - m_new)
            p = jnp.exp(s - m_new)
            l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)
            acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
            m_ref[...] = m_new

        @pl.when(ki == last)
        def _store():
            o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


def workload(${args}):
    sh = (${shapes})  # every input's shape: the kernel's shapes are written from these
${prefix}
    q = jnp.transpose(${q}, ${q_perm})  # [batch..., groups..., S_q, D]
    k = jnp.transpose(${k}, ${k_perm})  # [batch..., S_kv, D]
    v = jnp.transpose(${v}, ${v_perm})  # [batch..., S_kv, D_v]
    nb, gs = q.shape[:${n_batch}], q.shape[${n_batch}:${n_lead}]
    n, g = math.prod(nb), math.prod(gs)
    s_q, d, s_kv, dv = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
${bias_prep}
    q = q.reshape(n, g, s_q, d)
    k = k.reshape(n, s_kv, d)
    v = v.reshape(n, s_kv, dv)
    bq, bkv = min(BLOCK_Q, s_q), min(BLOCK_KV, s_kv)
    nq, nk = pl.cdiv(s_q, bq), pl.cdiv(s_kv, bkv)

    def q_map(i, j, qi, ki):
        return i, j, qi, 0

    def kv_map(i, j, qi, step):  # clamped: skipped steps past the diagonal fetch nothing new
        return i, jnp.minimum(step % nk, _last_kv(qi, bq, bkv, nk)), 0

    def v_map(i, j, qi, step):  # two passes: the first needs no v, so it holds block 0 (one fetch)
        ki = jnp.where(step < nk, 0, step - nk) if TWO_PASS else step
        return i, jnp.minimum(ki, _last_kv(qi, bq, bkv, nk)), 0

${bias_map}
    sq = pl.Squeezed()
    out = pl.pallas_call(
        functools.partial(_kernel, s_kv=s_kv, nk=nk),
        out_shape=jax.ShapeDtypeStruct((n, g, s_q, dv), jnp.${out_dtype}),
        grid=(n, g, nq, PASSES * nk),
        in_specs=[
            pl.BlockSpec((sq, sq, bq, d), q_map),
            pl.BlockSpec((sq, bkv, d), kv_map),
            pl.BlockSpec((sq, bkv, dv), v_map),${bias_spec}
        ],
        out_specs=pl.BlockSpec((sq, sq, bq, dv), q_map),
        scratch_shapes=[
            pltpu.VMEM((bq, 1), jnp.float32),  # running row max
            pltpu.VMEM((bq, 1), jnp.float32),  # running row sum
            pltpu.VMEM((bq, dv), jnp.float32),  # unnormalised output
        ],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=VMEM_LIMIT_BYTES,
        ),
        interpret=False,
        name="offline_flash_program",
    )(q, k, v${bias_arg})
    ${dot2_out} = jnp.transpose(out.reshape(nb + gs + (s_q, dv)), ${out_perm})
${tail}
    return ${result}
'''

BLOCKS = (128, 256, 512, 1024)


def build(program: Program, sym: Symbolic) -> Template | None:
    """The flash template of a plain-attention program, or None (the caller keeps its own)."""
    r = recognise(program)
    if r is None:
        return None
    eqns = program["equations"]

    def lines(idx: Sequence[int]) -> str:
        sub = {**program, "equations": [eqns[i] for i in idx]}
        return "\n".join(f"    {ln}" for ln in body_lines(sub, None, None, sym)) or "    # (none)"

    score_lines = []
    for op in r["ops"]:  # in the reference's order
        if op in ("scale", "scale_div"):
            e = eqns[r["scale"][0]]
            lit = operand(sym.literal(e, r["scale"][1]))
            sign = "*" if op == "scale" else "/"
            score_lines.append(f"    s = s {sign} {lit}  # the reference's scale, in its dtype")
        else:
            score_lines.append("    s = s + bias_ref[...].astype(s.dtype)  # the reference's score bias")
    scale_line = "\n".join(score_lines) or "    # (no scale)"
    b = r["bias"]
    bias_parts = {"bias_ref": "", "bias_prep": "", "bias_spec": "", "bias_arg": "", "bias_map": ""}
    if b is not None:
        bias_parts = {
            "bias_ref": "bias_ref, ",
            "bias_prep": (
                f"    bias = jnp.transpose({b['input']}, {tuple(b['perm'])})  # [its batch axes..., S_q, S_kv]\n"
                f"    bias = bias.reshape((-1,) + bias.shape[-2:])\n"
                f"    nbias = bias.shape[0]  # the trailing batch axes it varies over: n % nbias"
            ),
            "bias_spec": "\n            pl.BlockSpec((sq, bq, bkv), bias_map),",
            "bias_arg": ", bias",
            "bias_map": (
                "    def bias_map(i, j, qi, step):  # the bias tile of q block qi, kv block step % nk\n"
                "        return i % nbias, qi, jnp.minimum(step % nk, _last_kv(qi, bq, bkv, nk))\n"
            ),
        }
    prefix, tail = lines(r["prefix"]), lines(r["tail"])
    if sym.unsolved:
        return None
    at = sym.at(sym.target)
    n_lead = r["n_batch"] + r["n_groups"]
    fixed = {
        "args": ", ".join(program["input_names"]),
        "shapes": ", ".join(f"{n}.shape" for n in program["input_names"])
        + ("," if len(program["input_names"]) == 1 else ""),
        "prefix": prefix,
        "tail": tail,
        "q": r["q"], "k": r["k"], "v": r["v"],
        "q_perm": str(tuple(r["q_perm"])), "k_perm": str(tuple(r["k_perm"])), "v_perm": str(tuple(r["v_perm"])),
        "out_perm": str(tuple(r["out_perm"])),
        "n_batch": str(r["n_batch"]), "n_lead": str(n_lead),
        "dot2_out": r["dot2_out"],
        "result": program["outputs"][0],
        "causal": str(r["causal"]),
        "causal_note": " Causal: kv blocks above the diagonal are skipped." if r["causal"] else "",
        "two_pass": str(r["two_pass"]),
        "two_pass_note": (
            "The reference rounds the normalised probabilities to its dtype before p·v, so the kv axis is\n"
            "walked twice: the row max and sum first, then p = exp(s - max) / sum, rounded as the reference\n"
            "rounds it (one pass would round the unnormalised exp instead: ulps apart wherever p·v cancels)."
            if r["two_pass"]
            else "One pass: the probabilities stay unnormalised until the end, as the reference never rounds them."
        ),
        "scale_line": scale_line,
        **bias_parts,
        "score_dtype": r["score_dtype"], "out_dtype": r["out_dtype"],
        "target": f"{sym.target}: outputs {[tuple(s['shape']) for s in at['out_specs']]}",
    }  # fmt: skip
    shapes = {n: s["shape"] for n, s in zip(program["input_names"], at["inputs"], strict=True)}
    k_in = shapes.get(r["k"]) or []
    s_kv = max(k_in) if k_in else 1  # only used to rank configs

    def vmem(c: Mapping[str, Any], d: Mapping[str, int]) -> int:
        bq, bkv, hd = int(c["block_q"]), int(c["block_kv"]), 256
        return 2 * 2 * (2 * bq * hd + 2 * bkv * hd) + 4 * bq * (hd + 256) + 4 * 4 * bq * bkv

    def problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
        return [
            f"{k}={c[k]} is not one of {list(BLOCKS)}" for k in ("block_q", "block_kv") if c[k] not in BLOCKS
        ]

    def cost(c: Mapping[str, Any], d: Mapping[str, int]) -> float:
        steps = math.ceil(s_kv / int(c["block_q"])) * math.ceil(s_kv / int(c["block_kv"]))
        steps *= 2 if r["two_pass"] else 1
        return 0.35 * steps + (1e6 if vmem(c, d) > 48 * MiB else 0.0)

    return Template(
        name="flash_program",
        operators=("program",),
        source=SOURCE,
        tunables={"block_q": BLOCKS, "block_kv": BLOCKS},
        dims_of=lambda sizes: {},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial={"block_q": 512, "block_kv": 512},
        fixed=lambda op: fixed,
        constraints=("block_q, block_kv multiples of 128 (clamped to the sequence length)",),
        grid_axes=lambda c: ["batch", "groups", "q", "kv"],
        semantics=lambda c: ["parallel", "parallel", "parallel", "arbitrary"],
    )
