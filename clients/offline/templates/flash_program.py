"""Attention from a traced program as an online softmax (flash): K/V tiled over the kv axis.

The `attention` class holds the whole score matrix per block, which does not fit VMEM at production
sequence lengths. When the program is attention (a first dot_general q·kᵀ; its scores through
transposes, reshapes of the heads, literal scales and a soft-cap's tanh, one score bias and one mask
whose fill carries no weight; a softmax over the kv axis; a second dot_general p·v), this module
recognises the roles of the axes by propagating labels through the program: the dots' dimension
numbers say which axes are batch, contracted and free, the softmax's reduction says which free axis is
kv, the mask's broadcast says which is the query's. A constant mask must be exactly causal (the kernel
writes it from iotas); a mask computed from inputs (Gemma 2's attention mask ANDed with a sliding
window around each position) is computed outside the kernel by the reference's own equations and tiled
with the scores, its fill replacing a masked score as the reference's select does. q, k and v come from
the inputs through the reference's leading equations (a fused qkv split, RoPE), run as they are.

The kernel brings q, k, v to [N, G, D, S] / [N, D, S] (N: the batch axes, G: the query's extra free axes,
the query heads per kv head in GQA): the sequence on lanes, the layout XLA keeps a [..., S, H, D] array
in on TPU, so the transposes cost nothing there. With a score bias it keeps [N, G, S, D] instead (the
bias is not transposed outside). Running max / sum / accumulator live in f32 VMEM scratch initialised
under pl.when(kv == 0); kv blocks above the diagonal are skipped when causal; the result goes back
through the reference's own trailing equations. Anything else returns None, and the caller keeps the
whole-score template.
"""

from __future__ import annotations

import ast
import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from maxkernel.clients.offline.dims import Symbolic
from maxkernel.clients.offline.templates import scalars
from maxkernel.clients.offline.templates.base import MiB, Template
from maxkernel.tpu_tools.problem.emit import Program, body_lines, dot_kind, mxu_dots, operand

PASS = {"convert_element_type", "stop_gradient"}  # value-preserving for the axis labels
_MASK_PRIMS = {"iota", "add", "sub", "ge", "gt", "le", "lt", "eq", "ne", "and", "or", "not",
               "select_n", "broadcast_in_dim", "convert_element_type"}  # fmt: skip


def lit_value(text: str) -> Any:
    """The value of a literal operand `lit:...` (numbers, bools, jnp.asarray(x, dtype))."""
    body = text[4:]
    if body in ("True", "False"):
        return body == "True"
    if body.startswith("jnp.asarray("):
        inner = body[len("jnp.asarray(") : -1].rsplit(",", 1)[0]
        return float(eval(inner, {"float": float}))  # noqa: S307 - our own traced literal text
    return float(ast.literal_eval(body))


class Graph:
    """A traced program's producers, users and ancestry (the flash and cross-entropy recognisers read it)."""

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
                return np.asarray(lit_value(n))
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


_SOFTMAX_PRIMS = PASS | {"reduce_max", "max", "broadcast_in_dim", "sub", "exp", "reduce_sum", "div", "reshape",
                         "transpose", "mul", "tanh", "select_n", "add"}  # fmt: skip


def _downstream_of(g: Graph, start: int) -> set[int]:
    """Equations that (transitively) use equation `start`'s outputs."""
    live, out = set(g.eqns[start]["outputs"]), set()
    for i in range(start + 1, len(g.eqns)):
        if live & set(g.eqns[i]["inputs"]):
            live |= set(g.eqns[i]["outputs"])
            out.add(i)
    return out


def _dims(e: dict) -> tuple[tuple, tuple, tuple, tuple]:
    (lc, rc), (lb, rb) = ast.literal_eval(e["params"]["dimension_numbers"])
    return tuple(lc), tuple(rc), tuple(lb), tuple(rb)


def _dot_labels(e: dict, left: list, right: list, g: Graph) -> list:
    """The labels of a dot_general's output axes: batch (from the left), left free, right free."""
    lc, rc, lb, rb = _dims(e)
    nl, nr = len(g.shape(e["inputs"][0])), len(g.shape(e["inputs"][1]))
    return (
        [left[a] for a in lb]
        + [left[a] for a in range(nl) if a not in lc + lb]
        + [right[a] for a in range(nr) if a not in rc + rb]
    )


def _reshape_labels(src: Sequence[int], dst: Sequence[int], labels: list) -> list | None:
    """The labels of a reshape's output: adjacent axes merged into one ("M", parts, sizes) or a merged
    axis split back into its parts; size-1 axes carry no label of their own. None for anything else."""
    out: list = [("ONE", a) for a in range(len(dst))]
    i = j = 0
    while i < len(src) or j < len(dst):
        gi, gj = [], []
        ps = pd = 1
        while True:
            if i < len(src) and (ps < pd or not gi or (ps == pd and src[i] == 1 and not gj)):
                gi.append(i)
                ps *= src[i]
                i += 1
            elif j < len(dst) and (pd < ps or not gj):
                gj.append(j)
                pd *= dst[j]
                j += 1
            else:
                break
            if ps == pd and gi and gj and (i >= len(src) or src[i] != 1) and (j >= len(dst) or dst[j] != 1):
                break
        if ps != pd:
            return None
        si = [a for a in gi if src[a] != 1]
        dj = [a for a in gj if dst[a] != 1]
        if len(gi) == len(gj) == 1:
            out[gj[0]] = labels[gi[0]]
        elif len(si) == 1 and len(dj) == 1:
            out[dj[0]] = labels[si[0]]
        elif len(dj) == 1 and si:
            out[dj[0]] = ("M", tuple(labels[a] for a in si), tuple(src[a] for a in si))
        elif len(si) == 1 and dj:
            lab = labels[si[0]]
            if lab[0] != "M" or list(lab[2]) != [dst[a] for a in dj]:
                return None
            for a, part in zip(dj, lab[1], strict=True):
                out[a] = part
        elif si or dj:
            return None
    return out


def _unbroadcast(g: Graph, name: str) -> tuple[str, list[int | None]]:
    """The array `name` was broadcast from, and for each of its axes the axis of `name` it lands on
    (None: a size-1 axis broadcast along it)."""
    axes: list[int | None] = list(range(len(g.shape(name))))
    while name in g.producer and g.eqns[g.producer[name]]["primitive"] == "broadcast_in_dim":
        e = g.eqns[g.producer[name]]
        src = e["inputs"][0]
        if src.startswith("lit:"):
            break
        bdims = ast.literal_eval(e["params"]["broadcast_dimensions"])
        shape, src_shape = g.shape(name), g.shape(src)
        axes = [axes[d] if src_shape[k] == shape[d] else None for k, d in enumerate(bdims)]
        name = src
    return name, axes


def recognise(program: Program, *, decode: bool = False) -> dict[str, Any] | None:
    """The plain-attention roles of `program`, or None when it is anything else. `decode`: a mask over the
    kv axis alone is allowed (one query per sequence: a length mask); its `mask["has_q"]` is then False."""
    g = Graph(program)
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
    scale, mask, cur, q_label, bias, ops, op_eqns = None, None, e1["outputs"][0], None, None, [], []
    mask_in, scalar_scales = None, []
    while True:  # the score chain: transposes, reshapes, casts, literal scales, tanh, one bias, one mask
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
        elif prim == "reshape":  # heads merged into one axis (and split back before p·v)
            merged = _reshape_labels(g.shape(cur), g.shape(out), lab[cur])
            if merged is None:
                return None
            lab[out] = merged
        elif prim == "mul" and len(ins) == 2 and sum(a.startswith("lit:") for a in ins) == 1:
            pos = next(j for j, a in enumerate(ins) if a.startswith("lit:"))
            scale = scale or (i, pos)
            ops.append("scale")
            op_eqns.append((i, pos))
            lab[out] = lab[cur]
        elif prim == "div" and len(ins) == 2 and ins[0] == cur and ins[1].startswith("lit:"):
            scale = scale or (i, 1)  # scores / sqrt(d), as Flax and many users write it
            ops.append("scale_div")  # also a soft-cap's tanh(s / c) * c
            op_eqns.append((i, 1))
            lab[out] = lab[cur]
        elif (
            prim in ("mul", "div")
            and len(ins) == 2
            and (ins[0] == cur if prim == "div" else cur in ins and ins[0] != ins[1])
            and (other := ins[1 - ins.index(cur)]) in g.p["input_names"]
            and g.shape(other) == []
            and g.p["inputs"][g.p["input_names"].index(other)]["dtype"] == e["out_specs"][0]["dtype"]
        ):
            # a scale that is an input (a traced softmax scale or temperature): one SMEM word in the kernel
            scale = scale or (i, 1 - ins.index(cur))
            ops.append("scale_input" if prim == "mul" else "scale_div_input")
            op_eqns.append((i, 1 - ins.index(cur)))
            scalar_scales.append(other)
            lab[out] = lab[cur]
        elif prim == "tanh":  # a soft-cap (Gemma 2: tanh(s / 50) * 50)
            ops.append("tanh")
            op_eqns.append((i, None))
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
            op_eqns.append((i, None))
            lab[out] = lab[cur]
        elif (
            prim == "select_n"
            and mask is None
            and len(ins) == 3
            and ins[2] == cur
            and g.depends_on_input(pred := ins[0])
        ):
            # a mask computed from inputs (a padding or sliding-window mask the model built): computed
            # as the reference computes it, outside the kernel, and tiled with the scores
            fill = ins[1]
            f = None if g.depends_on_input(fill) else g.evaluate(fill)
            if f is None or np.max(f) > -1e4 or np.min(f) != np.max(f):
                return None  # a fill that still carries weight, or one that is not a single value
            src, axes = _unbroadcast(g, pred)
            if src.startswith("lit:") or len(g.users.get(pred, [])) != 1:
                return None
            mask = "input"
            mask_in = {"src": src, "axes": axes, "labels": [None if a is None else lab[cur][a] for a in axes],
                       "fill": float(np.max(f)), "eq": i}  # fmt: skip
            ops.append("mask")
            op_eqns.append((i, None))
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
    if mask_in is not None:  # the mask's own axes: batch axes, kv, and the query's sequence axis
        rest = [x for x in mask_in["labels"] if x is not None and x != kv_label and x[0] != "B"]
        if len(rest) > 1 or (not rest and not decode) or kv_label not in mask_in["labels"]:
            return None
        q_label = rest[0] if rest else None
    if q_label is None:
        if len(q_free) != 1 and not (decode and q_free):
            return None  # which free axis is the query's sequence decides the causal and mask tiles
        q_label = (q_side, q_free[-1])  # decode: no mask over the queries, so any free axis serves
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
            and eqns[g.producer[a]]["primitive"] in PASS | {"div", "reshape"}
        ),
        None,
    )
    if p_name is None:
        return None
    v_op = next(a for a in e2["inputs"] if a != p_name)
    # p back to the softmax's division through casts and reshapes (heads split back into kv heads x group)
    chain, base = [], p_name
    while eqns[g.producer[base]]["primitive"] != "div":
        chain.append(g.producer[base])
        base = eqns[chain[-1]]["inputs"][0]
        if base not in g.producer or g.producer[base] <= d1:
            return None
    # does the reference round the normalised probabilities to a narrower dtype before p·v?
    rounds_normalised = any(
        eqns[c]["primitive"] == "convert_element_type"
        and eqns[c]["out_specs"][0]["dtype"] in ("bfloat16", "float16")
        for c in chain
    )
    pi = e2["inputs"].index(p_name)
    # p's labels: the score labels (after the softmax, same layout as the reduce_max input)
    if g.shape(base) != g.shape(cur):
        return None
    p_labels = lab[cur]
    for c in reversed(chain):
        if eqns[c]["primitive"] == "reshape":
            p_labels = _reshape_labels(
                g.shape(eqns[c]["inputs"][0]), g.shape(eqns[c]["outputs"][0]), p_labels
            )
            if p_labels is None:
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
    # the prefix (input -> operand: a fused qkv split, RoPE, ...) and tail (second dot -> output) equations
    scores = {d1, *_downstream_of(g, d1)}
    prefix: set[int] = set()
    for op in (q_op, k_op, v_op):
        up = g.ancestors(op)
        if up & scores or any(eqns[i]["primitive"] in ("dot_general", "ragged_dot_general") for i in up):
            return None
        prefix |= up
    mask_out, mask_prefix = None, set()
    if mask_in is not None:
        mask_prefix = g.ancestors(mask_in["src"])
        if mask_prefix & scores:
            return None  # a mask that depends on the scores is not a mask
        labels = mask_in["labels"]
        if any(x is not None and x[0] not in ("B", q_side, k_side) for x in labels):
            return None
        keep = [k for k, x in enumerate(labels) if x is not None]
        in_batch = sorted((x for x in labels if x is not None and x[0] == "B"), key=batch_labels.index)
        has_q = q_label in labels
        mask_out = {
            "input": mask_in["src"],
            "squeeze": [k for k, x in enumerate(labels) if x is None],
            "has_q": has_q,
            "perm": [
                keep.index(labels.index(x)) for x in (*in_batch, *([q_label] if has_q else []), kv_label)
            ],
            "batch": [batch_labels.index(x) for x in in_batch],
            "fill": mask_in["fill"],
        }
    inside = {
        i for i in range(d1 + 1, d2) if i not in mask_prefix and g.depends_on_input(eqns[i]["outputs"][0])
    }
    if any(eqns[i]["primitive"] not in _SOFTMAX_PRIMS for i in inside):
        return None  # between the dots: the score chain and the softmax only (constants aside)
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
    used = prefix | mask_prefix | set(range(d1, d2 + 1)) | set(tail)
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
        "d1": d1, "d2": d2, "bias": bias_out, "ops": ops, "op_eqns": op_eqns, "two_pass": rounds_normalised,
        "mask": mask_out, "mask_prefix": sorted(mask_prefix - prefix), "scalars": scalar_scales,
        "q_perm_t": list(qb) + groups + [qc, q_seq],
        "k_perm_t": list(kb) + [kc, k_free[0]],
        "v_perm_t": v_batch + [v_free[0], vc[0]],
        "out_perm_t": [(batch_labels + [(q_side, a) for a in groups] + [("V", 0), (q_side, q_seq)]).index(x) for x in out2],
    }  # fmt: skip


# What the kernels of both layouts open with: imports, the config, the constants, the causal bound.
# One online-softmax step over a score tile in rows (s [rows, kv], v [kv, D]; running max, sum and
# accumulator in f32 VMEM scratch): the text every rows-layout kernel writes (here and paged_attention).
ONLINE_ROWS = """m_prev = m_ref[...]
m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
alpha = jnp.exp(m_prev - m_new)
p = jnp.exp(s - m_new)
l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)
acc_ref[...] = alpha * acc_ref[...] + ${pv_dot}(p.astype(v.dtype), v, (((1,), (0,)), ((), ())))
m_ref[...] = m_new"""

_PRELUDE = '''
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
MASK_VALUE = -1e30  # scores above the diagonal (causal): exp() of them is 0 in f32


def _last_kv(qi, block_q, block_kv, nk):
    """The last kv block a q block needs (causal: the diagonal's; else the last)."""
    if not CAUSAL:
        return nk - 1
    return jnp.minimum((qi * block_q + block_q - 1) // block_kv, nk - 1)


${mxu_dot}

'''

SOURCE = (
    '''"""Attention as an online softmax (offline template `flash_program`), from the reference's traced program.

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
'''
    + _PRELUDE
    + '''def _scores(q_ref, k_ref, ${extra_refs}qi, ki, s_kv):
    """The reference's masked f32 scores of q block qi against kv block ki."""
    block_q, block_kv = q_ref.shape[0], k_ref.shape[0]
    q, k = q_ref[...], k_ref[...]
    s = ${qk_dot}(q, k, (((1,), (1,)), ((), ())))
    s = s.astype(jnp.${score_dtype})  # the reference's score dtype
${scale_line}
    s = s.astype(jnp.float32)
    rows = qi * block_q + lax.broadcasted_iota(jnp.int32, s.shape, 0)
    cols = ki * block_kv + lax.broadcasted_iota(jnp.int32, s.shape, 1)
    if CAUSAL:
        s = jnp.where(cols <= rows, s, MASK_VALUE)
    return jnp.where(cols < s_kv, s, -jnp.inf)  # columns past the sequence (a partial block) never count


def _v_block(v_ref, ki, s_kv):
    v = v_ref[...]
    v_rows = ki * v.shape[0] + lax.broadcasted_iota(jnp.int32, (v.shape[0], 1), 0)
    return jnp.where(v_rows < s_kv, v, jnp.zeros_like(v))  # a partial block's rows past the end


def _kernel(q_ref, k_ref, v_ref, ${extra_refs}o_ref, m_ref, l_ref, acc_ref, *, s_kv, nk):
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
            s = _scores(q_ref, k_ref, ${extra_refs}qi, ki, s_kv)
            m_prev = m_ref[...]
            m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
            l_ref[...] = jnp.exp(m_prev - m_new) * l_ref[...] + jnp.sum(jnp.exp(s - m_new), axis=-1, keepdims=True)
            m_ref[...] = m_new

        @pl.when(jnp.logical_and(step >= nk, ki <= last))
        def _weighted():  # pass 2: the normalised probabilities, rounded as the reference rounds them
            s = _scores(q_ref, k_ref, ${extra_refs}qi, ki, s_kv)
            p = jnp.exp(s - m_ref[...]) / l_ref[...]
            v = _v_block(v_ref, ki, s_kv)
            acc_ref[...] += ${pv_dot}(p.astype(v.dtype), v, (((1,), (0,)), ((), ())))

        @pl.when(step == nk + last)
        def _store():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    else:

        @pl.when(ki <= last)
        def _update():
            s = _scores(q_ref, k_ref, ${extra_refs}qi, ki, s_kv)
            v = _v_block(v_ref, ki, s_kv)
'''
    + textwrap.indent(ONLINE_ROWS, " " * 12)
    + """

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
${extra_prep}
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

${extra_map}
    sq = pl.Squeezed()
    out = pl.pallas_call(
        functools.partial(_kernel, s_kv=s_kv, nk=nk),
        out_shape=jax.ShapeDtypeStruct((n, g, s_q, dv), jnp.${out_dtype}),
        grid=(n, g, nq, PASSES * nk),
        in_specs=[
            pl.BlockSpec((sq, sq, bq, d), q_map),
            pl.BlockSpec((sq, bkv, d), kv_map),
            pl.BlockSpec((sq, bkv, dv), v_map),${extra_spec}
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
    )(q, k, v${extra_arg})
    ${dot2_out} = jnp.transpose(out.reshape(nb + gs + (s_q, dv)), ${out_perm})
${tail}
    return ${result}
"""
)

SOURCE_T = (
    '''"""Attention as an online softmax with the sequence on lanes (offline template `flash_program`).

The reference's q, k, v are brought to [N, G, D, S] / [N, D, S] (N: its batch axes, G: the query's
extra axes per kv head): D on sublanes and the sequence on lanes, the layout XLA keeps a [..., S, H, D]
array in on TPU, so the transposes around the kernel are free. Each step computes the transposed score
tile s^T = k^T q, [block_kv, block_q]: the softmax reduces over sublanes, its running max and sum are
[1, block_q] rows, and the output o^T = v^T p^T is a plain matmul into a [D_v, block_q] f32 accumulator
(set under pl.when(kv == 0)). kv blocks are walked innermost ("arbitrary"); a step holds every query
head of one kv head (grouped query heads), so the k, v and mask tiles are read once for all of them.${causal_note}
${two_pass_note}
The result goes back to the reference's layout through its own trailing equations.

Shape-generic: every shape is read from the inputs when the kernel is traced; the block sizes were
chosen for the target size (${target}) and clamp to smaller inputs; a partial last block is masked
(kv rows past the sequence never count, and their v columns are zeroed).
"""
'''
    + _PRELUDE
    + '''def _scores(q, k, keep, ${scalar_refs}qi, ki, s_kv):
    """The reference's masked f32 scores, transposed: [block_kv, block_q] of kv block ki against q block qi."""
    block_q, block_kv = q.shape[1], k.shape[1]
    s = ${qk_dot}(k, q, (((0,), (0,)), ((), ())))
    s = s.astype(jnp.${score_dtype})  # the reference's score dtype
${scale_line}
    s = s.astype(jnp.float32)
    if CAUSAL:
        rows = qi * block_q + lax.broadcasted_iota(jnp.int32, s.shape, 1)
        cols = ki * block_kv + lax.broadcasted_iota(jnp.int32, s.shape, 0)
        s = jnp.where(cols <= rows, s, MASK_VALUE)
    if s_kv % block_kv:  # kv rows past the sequence (a partial last block) never count
        cols = ki * block_kv + lax.broadcasted_iota(jnp.int32, s.shape, 0)
        s = jnp.where(cols < s_kv, s, -jnp.inf)
    return s


def _v_block(v_ref, ki, s_kv):
    v = v_ref[...]  # [D_v, block_kv]
    if s_kv % v.shape[1] == 0:
        return v
    cols = ki * v.shape[1] + lax.broadcasted_iota(jnp.int32, (1, v.shape[1]), 1)
    return jnp.where(cols < s_kv, v, jnp.zeros_like(v))  # a partial block's columns past the end


def _kernel(q_ref, k_ref, v_ref, ${extra_refs}o_ref, m_ref, l_ref, acc_ref, *, s_kv, nk):
    qi, step = pl.program_id(1), pl.program_id(2)
    ki = step % nk if TWO_PASS else step
    groups, block_q, block_kv = q_ref.shape[0], q_ref.shape[2], k_ref.shape[1]
    last = _last_kv(qi, block_q, block_kv, nk)

    @pl.when(step == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    if TWO_PASS:

        @pl.when(jnp.logical_and(step < nk, ki <= last))
        def _statistics():  # pass 1: the column max and the sum of exp(s - max), per query head
            k, keep = k_ref[...], ${keep}
            for j in range(groups):
                s = _scores(q_ref[j], k, keep, ${scalar_refs}qi, ki, s_kv)
                m_prev = m_ref[j]  # [1, block_q]
                m_new = jnp.maximum(m_prev, jnp.max(s, axis=0, keepdims=True))
                l_ref[j] = jnp.exp(m_prev - m_new) * l_ref[j] + jnp.sum(jnp.exp(s - m_new), axis=0, keepdims=True)
                m_ref[j] = m_new

        @pl.when(jnp.logical_and(step >= nk, ki <= last))
        def _weighted():  # pass 2: the normalised probabilities, rounded as the reference rounds them
            k, v, keep = k_ref[...], _v_block(v_ref, ki, s_kv), ${keep}
            for j in range(groups):
                s = _scores(q_ref[j], k, keep, ${scalar_refs}qi, ki, s_kv)
                p = jnp.exp(s - m_ref[j]) / l_ref[j]
                acc_ref[j] += ${pv_dot}(v, p.astype(v.dtype), (((1,), (0,)), ((), ())))

        @pl.when(step == nk + last)
        def _store():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    else:

        @pl.when(ki <= last)
        def _update():
            k, v, keep = k_ref[...], _v_block(v_ref, ki, s_kv), ${keep}
            for j in range(groups):
                s = _scores(q_ref[j], k, keep, ${scalar_refs}qi, ki, s_kv)  # [block_kv, block_q]
                m_prev = m_ref[j]  # [1, block_q]
                m_new = jnp.maximum(m_prev, jnp.max(s, axis=0, keepdims=True))
                alpha = jnp.exp(m_prev - m_new)
                p = jnp.exp(s - m_new)
                l_ref[j] = alpha * l_ref[j] + jnp.sum(p, axis=0, keepdims=True)
                acc_ref[j] = alpha * acc_ref[j] + ${pv_dot}(v, p.astype(v.dtype), (((1,), (0,)), ((), ())))
                m_ref[j] = m_new

        @pl.when(ki == last)
        def _store():
            o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)  # [groups, D_v, block_q]


def workload(${args}):
    sh = (${shapes})  # every input's shape: the kernel's shapes are written from these
${prefix}
    q = jnp.transpose(${q}, ${q_perm})  # [batch..., groups..., D, S_q]
    k = jnp.transpose(${k}, ${k_perm})  # [batch..., D, S_kv]
    v = jnp.transpose(${v}, ${v_perm})  # [batch..., D_v, S_kv]
    nb, gs = q.shape[:${n_batch}], q.shape[${n_batch}:${n_lead}]
    n, g = math.prod(nb), math.prod(gs)
    d, s_q, s_kv, dv = q.shape[-2], q.shape[-1], k.shape[-1], v.shape[-2]
${extra_prep}
    q = q.reshape(n, g, d, s_q)
    k = k.reshape(n, d, s_kv)
    v = v.reshape(n, dv, s_kv)
    bq, bkv = min(BLOCK_Q, s_q), min(BLOCK_KV, s_kv)
    nq, nk = pl.cdiv(s_q, bq), pl.cdiv(s_kv, bkv)

    def q_map(i, qi, step):  # q / out are (n, g, D, s_q): every group's [D, block_q] columns of q block qi
        return i, 0, 0, qi

    def kv_map(i, qi, step):  # clamped: skipped steps past the diagonal fetch nothing new
        return i, 0, jnp.minimum(step % nk, _last_kv(qi, bq, bkv, nk))

    def v_map(i, qi, step):  # two passes: the first needs no v, so it holds block 0 (one fetch)
        ki = jnp.where(step < nk, 0, step - nk) if TWO_PASS else step
        return i, 0, jnp.minimum(ki, _last_kv(qi, bq, bkv, nk))

${extra_map}
    sq = pl.Squeezed()
    out = pl.pallas_call(
        functools.partial(_kernel, s_kv=s_kv, nk=nk),
        out_shape=jax.ShapeDtypeStruct((n, g, dv, s_q), jnp.${out_dtype}),
        grid=(n, nq, PASSES * nk),
        in_specs=[
            pl.BlockSpec((sq, g, d, bq), q_map),
            pl.BlockSpec((sq, d, bkv), kv_map),
            pl.BlockSpec((sq, dv, bkv), v_map),${extra_spec}
        ],
        out_specs=pl.BlockSpec((sq, g, dv, bq), q_map),
        scratch_shapes=[
            pltpu.VMEM((g, 1, bq), jnp.float32),  # running max per query
            pltpu.VMEM((g, 1, bq), jnp.float32),  # running sum per query
            pltpu.VMEM((g, dv, bq), jnp.float32),  # unnormalised output, transposed
        ],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=VMEM_LIMIT_BYTES,
        ),
        interpret=False,
        name="offline_flash_program",
    )(q, k, v${extra_arg})
    ${dot2_out} = jnp.transpose(out.reshape(nb + gs + (dv, s_q)), ${out_perm})
${tail}
    return ${result}
'''
)


# What the row-tile kernel changes in SOURCE_T: the same transposed score tile, from [block, D] tiles.
_ROW_TILES = (
    (
        '''"""Attention as an online softmax with the sequence on lanes (offline template `flash_program`).

The reference's q, k, v are brought to [N, G, D, S] / [N, D, S] (N: its batch axes, G: the query's
extra axes per kv head): D on sublanes and the sequence on lanes, the layout XLA keeps a [..., S, H, D]
array in on TPU, so the transposes around the kernel are free. Each step computes the transposed score
tile s^T = k^T q, [block_kv, block_q]: the softmax reduces over sublanes, its running max and sum are
[1, block_q] rows, and the output o^T = v^T p^T is a plain matmul into a [D_v, block_q] f32 accumulator
(set under pl.when(kv == 0)).''',
        '''"""Attention as an online softmax with the scores' sequence on lanes (offline template `flash_program`).

The reference's q, k, v already hold the sequence second-to-last ([N, G, S, D] / [N, S, D]; N: its
batch axes, G: the query's extra axes per kv head), so the kernel reads [block, D] tiles as they lie,
with no transpose around it. Each step computes the transposed score tile s^T = k q^T, [block_kv,
block_q] (both operands contract D): the softmax reduces over sublanes, its running max and sum are
[1, block_q] rows, and the output o^T = v^T p^T (contracting the kv axis of both) goes into a [D_v,
block_q] f32 accumulator (set under pl.when(kv == 0)), transposed once per q block when it is stored.''',
    ),
    ("block_q, block_kv = q.shape[1], k.shape[1]", "block_q, block_kv = q.shape[0], k.shape[0]"),
    ("(k, q, (((0,), (0,)), ((), ())))", "(k, q, (((1,), (1,)), ((), ())))"),
    (
        """    v = v_ref[...]  # [D_v, block_kv]
    if s_kv % v.shape[1] == 0:
        return v
    cols = ki * v.shape[1] + lax.broadcasted_iota(jnp.int32, (1, v.shape[1]), 1)
    return jnp.where(cols < s_kv, v, jnp.zeros_like(v))  # a partial block's columns past the end""",
        """    v = v_ref[...]  # [block_kv, D_v]
    if s_kv % v.shape[0] == 0:
        return v
    rows = ki * v.shape[0] + lax.broadcasted_iota(jnp.int32, (v.shape[0], 1), 0)
    return jnp.where(rows < s_kv, v, jnp.zeros_like(v))  # a partial block's rows past the end""",
    ),
    ("q_ref.shape[2], k_ref.shape[1]", "q_ref.shape[1], k_ref.shape[0]"),
    ("(v, p.astype(v.dtype), (((1,), (0,)), ((), ())))", "(v, p.astype(v.dtype), (((0,), (0,)), ((), ())))"),
    (
        "o_ref[...] = acc_ref[...].astype(o_ref.dtype)",
        "for j in range(groups):\n                o_ref[j] = acc_ref[j].T.astype(o_ref.dtype)  # [block_q, D_v]",
    ),
    (
        "o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)  # [groups, D_v, block_q]",
        "for j in range(groups):\n                o_ref[j] = (acc_ref[j] / l_ref[j]).T.astype(o_ref.dtype)  # [block_q, D_v]",
    ),
    ("# [batch..., groups..., D, S_q]", "# [batch..., groups..., S_q, D]"),
    ("# [batch..., D, S_kv]", "# [batch..., S_kv, D]"),
    ("# [batch..., D_v, S_kv]", "# [batch..., S_kv, D_v]"),
    (
        "d, s_q, s_kv, dv = q.shape[-2], q.shape[-1], k.shape[-1], v.shape[-2]",
        "s_q, d, s_kv, dv = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]",
    ),
    (
        "q = q.reshape(n, g, d, s_q)\n    k = k.reshape(n, d, s_kv)\n    v = v.reshape(n, dv, s_kv)",
        "q = q.reshape(n, g, s_q, d)\n    k = k.reshape(n, s_kv, d)\n    v = v.reshape(n, s_kv, dv)",
    ),
    (
        "# q / out are (n, g, D, s_q): every group's [D, block_q] columns of q block qi\n        return i, 0, 0, qi",
        "# q / out are (n, g, s_q, D): every group's [block_q, D] rows of q block qi\n        return i, 0, qi, 0",
    ),
    (
        "return i, 0, jnp.minimum(step % nk, _last_kv(qi, bq, bkv, nk))",
        "return i, jnp.minimum(step % nk, _last_kv(qi, bq, bkv, nk)), 0",
    ),
    (
        "return i, 0, jnp.minimum(ki, _last_kv(qi, bq, bkv, nk))",
        "return i, jnp.minimum(ki, _last_kv(qi, bq, bkv, nk)), 0",
    ),
    ("ShapeDtypeStruct((n, g, dv, s_q)", "ShapeDtypeStruct((n, g, s_q, dv)"),
    ("pl.BlockSpec((sq, g, d, bq), q_map)", "pl.BlockSpec((sq, g, bq, d), q_map)"),
    ("pl.BlockSpec((sq, d, bkv), kv_map)", "pl.BlockSpec((sq, bkv, d), kv_map)"),
    ("pl.BlockSpec((sq, dv, bkv), v_map)", "pl.BlockSpec((sq, bkv, dv), v_map)"),
    ("pl.BlockSpec((sq, g, dv, bq), q_map)", "pl.BlockSpec((sq, g, bq, dv), q_map)"),
    ("out.reshape(nb + gs + (dv, s_q))", "out.reshape(nb + gs + (s_q, dv))"),
)


def _row_tiles(source: str) -> str:
    for old, new in _ROW_TILES:
        if old not in source:
            raise AssertionError(f"SOURCE_T no longer holds {old[:60]!r}: update _ROW_TILES with it")
        source = source.replace(old, new)
    return source


# the transposed score tile from row-layout tiles: for a reference whose q, k, v already hold the
# sequence second-to-last (JaxBench's [B, H, S, D]), where SOURCE_T's transposes are copies. tpu-v6e,
# llo, full, 1024 x 1024 blocks: 1p 7464 us (SOURCE_T, 1563 of them the copies) -> 5948, 4p 5205
SOURCE_R = _row_tiles(SOURCE_T)


BLOCKS = (128, 256, 512, 1024)


def _swap_last(perm: Sequence[int]) -> list[int]:
    return [*perm[:-2], perm[-1], perm[-2]]


def equation_lines(program: Program, idx: Sequence[int], sym: Symbolic) -> str:
    """The reference's equations at `idx` as the glue's lines (indented into `workload`), shapes from `sh`."""
    sub = {**program, "equations": [program["equations"][i] for i in idx]}
    return "\n".join(f"    {ln}" for ln in body_lines(sub, None, None, sym)) or "    # (none)"


def target_shapes(program: Program, sym: Symbolic) -> dict[str, list[int]]:
    """Every input's and equation output's shape at the target size (the cost models' dims)."""
    at = sym.at(sym.target)
    shapes = {n: s["shape"] for n, s in zip(program["input_names"], at["inputs"], strict=True)}
    for e, outs in zip(program["equations"], sym.eqn_shapes_at(sym.target), strict=True):
        shapes.update(zip(e["outputs"], outs, strict=False))
    return shapes


def score_chain_lines(program: Program, r: Mapping[str, Any], sym: Symbolic, keep: str) -> list[str]:
    """The kernel lines that apply the reference's score chain to `s`, in its order: its scale (or
    division), a soft-cap's tanh, its mask (`keep`: the kernel's boolean of scores that count) with its
    fill, and a score bias read from `bias_ref`."""
    eqns, out = program["equations"], []
    for op, (i, pos) in zip(r["ops"], r["op_eqns"], strict=True):
        if op in ("scale", "scale_div"):
            lit = operand(sym.literal(eqns[i], pos))
            sign = "*" if op == "scale" else "/"
            out.append(
                f"    s = s {sign} {lit}  # the reference's {'scale' if i == r['scale'][0] else 'cap'}, in its dtype"
            )
        elif op in ("scale_input", "scale_div_input"):
            name = eqns[i]["inputs"][pos]
            spec = program["inputs"][program["input_names"].index(name)]
            sign = "*" if op == "scale_input" else "/"
            out.append(
                f"    s = s {sign} {scalars.load(f'{name}_ref', spec)}  # the scalar {name}, one SMEM word"
            )
        elif op == "tanh":
            out.append("    s = jnp.tanh(s)  # the reference's soft-cap")
        elif op == "mask":
            out.append(
                f"    s = jnp.where({keep}, s, jnp.asarray({r['mask']['fill']!r}, s.dtype))  # its mask, its fill"
            )
        else:
            out.append("    s = s + bias_ref[...].astype(s.dtype)  # the reference's score bias")
    return out


def build(program: Program, sym: Symbolic) -> Template | None:
    """The flash template of a plain-attention program, or None (the caller keeps its own)."""
    r = recognise(program, decode=True)  # a length mask over the kv axis alone (decode) is spread over q
    if r is None:
        return None
    eqns = program["equations"]
    score_lines = score_chain_lines(program, r, sym, "keep" if r["bias"] is None else "mask_ref[...] != 0")

    # the sequence on lanes (transposed tiles) unless a score bias would then be transposed outside the
    # kernel: JaxBench's attention at full on v6e, llo: 1p 11820 -> 8749 us, 2p 24840 -> 12700, 4p 11910
    # -> 6466, but 5p (a [H, S, S] bias) 12030 -> 12750; Gemma 2's global attention 80.9 -> 62.1 on v5e
    tr = r["bias"] is None
    # ... but where q, k and v already hold the sequence second-to-last and D last ([B, H, S, D]), those
    # transposes are copies (1p: 1563 us of 9650): SOURCE_R reads their row tiles as they lie and
    # computes the same transposed score tile inside the kernel
    rows = tr and all(
        list(r[f"{x}_perm"][-2:]) == [len(r[f"{x}_perm"]) - 2, len(r[f"{x}_perm"]) - 1] for x in "qkv"
    )
    scale_line = "\n".join(score_lines) or "    # (no scale)"
    parts = {k: [] for k in ("extra_refs", "extra_prep", "extra_spec", "extra_arg", "extra_map")}
    b = r["bias"]
    if b is not None:
        parts["extra_refs"].append("bias_ref, ")
        parts["extra_prep"].append(
            f"    bias = jnp.transpose({b['input']}, {tuple(b['perm'])})  # [its batch axes..., S_q, S_kv]\n"
            f"    bias = bias.reshape((-1,) + bias.shape[-2:])\n"
            f"    nbias = bias.shape[0]  # the trailing batch axes it varies over: n % nbias"
        )
        parts["extra_spec"].append("\n            pl.BlockSpec((sq, bq, bkv), bias_map),")
        parts["extra_arg"].append(", bias")
        parts["extra_map"].append(
            "    def bias_map(i, j, qi, step):  # the bias tile of q block qi, kv block step % nk\n"
            "        return i % nbias, qi, jnp.minimum(step % nk, _last_kv(qi, bq, bkv, nk))\n"
        )
    m = r["mask"]
    if m is not None:
        src = f"lax.squeeze({m['input']}, {tuple(m['squeeze'])})" if m["squeeze"] else m["input"]
        parts["extra_refs"].append("mask_ref, ")
        if m["has_q"]:
            perm = _swap_last(m["perm"]) if tr else m["perm"]
            moved = f"    mask = jnp.transpose({src}, {tuple(perm)})  # [its batch axes..., {'S_kv, S_q' if tr else 'S_q, S_kv'}]\n"
        else:  # a mask over the kv axis alone (decode's lengths): the same row for every query, spread over them
            moved = (
                f"    mask = jnp.transpose({src}, {tuple(m['perm'])})[..., None, :]  # [its batch axes..., 1, S_kv]\n"
                f"    mask = jnp.broadcast_to(mask, mask.shape[:-2] + (s_q, s_kv))\n"
                + ("    mask = jnp.swapaxes(mask, -1, -2)  # [..., S_kv, S_q]\n" if tr else "")
            )
        parts["extra_prep"].append(
            moved
            + "    mask = mask.reshape((-1,) + mask.shape[-2:]).astype(jnp.int8)  # 1: the score counts\n"
            f"    mask_axes = {tuple(m['batch'])}  # the batch axes (of nb) it varies over"
        )
        parts["extra_spec"].append(
            f"\n            pl.BlockSpec({'(sq, bkv, bq)' if tr else '(sq, bq, bkv)'}, mask_map),"
        )
        parts["extra_arg"].append(", mask")
        tile = "jnp.minimum(step % nk, _last_kv(qi, bq, bkv, nk))"
        parts["extra_map"].append(
            "    def mask_index(i):  # flat batch index i -> the mask's own batch index\n"
            "        out, stride = 0, 1\n"
            "        for a in reversed(mask_axes):\n"
            "            out = out + (i // math.prod(nb[a + 1 :])) % nb[a] * stride\n"
            "            stride *= nb[a]\n"
            "        return out\n\n"
            f"    def mask_map(i, {'' if tr else 'j, '}qi, step):  # the mask tile of q block qi, kv block step % nk\n"
            f"        return mask_index(i), {tile + ', qi' if tr else 'qi, ' + tile}\n"
        )
    for name in r["scalars"]:  # a traced scale: one SMEM word (templates/scalars.py), after the bias and mask
        spec = program["inputs"][program["input_names"].index(name)]
        parts["extra_refs"].append(f"{name}_ref, ")
        parts["extra_spec"].append(f"\n            {scalars.SMEM_SPEC},")
        parts["extra_arg"].append(f", {scalars.arg(name, spec)}")
        parts["extra_map"].append(scalars.map_comment(name, spec))
    extra = {k: "".join(v) if k != "extra_prep" else "\n".join(v) for k, v in parts.items()}
    # SOURCE_T's scores take values and the mask as `keep`: its traced scales' refs are passed on by name
    extra["scalar_refs"] = "".join(f"{name}_ref, " for name in r["scalars"])
    outside = sorted(set(r["prefix"]) | set(r.get("mask_prefix", [])))
    prefix, tail = equation_lines(program, outside, sym), equation_lines(program, r["tail"], sym)
    if sym.unsolved:
        return None
    at = sym.at(sym.target)
    n_lead = r["n_batch"] + r["n_groups"]
    dot_defs, (qk_dot, pv_dot) = mxu_dots([dot_kind(program, eqns[r[d]]) for d in ("d1", "d2")])
    fixed = {
        "mxu_dot": dot_defs, "qk_dot": qk_dot, "pv_dot": pv_dot,
        "args": ", ".join(program["input_names"]),
        "shapes": ", ".join(f"{n}.shape" for n in program["input_names"])
        + ("," if len(program["input_names"]) == 1 else ""),
        "prefix": prefix,
        "tail": tail,
        "q": r["q"], "k": r["k"], "v": r["v"],
        **{f"{x}_perm": str(tuple(r[f"{x}_perm_t" if tr and not rows else f"{x}_perm"])) for x in ("q", "k", "v", "out")},
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
        **extra,
        "keep": "mask_ref[...] != 0  # read once for every head" if m is not None else "None",
        "score_dtype": r["score_dtype"], "out_dtype": r["out_dtype"],
        "target": f"{sym.target}: outputs {[tuple(s['shape']) for s in at['out_specs']]}",
    }  # fmt: skip
    shapes = target_shapes(program, sym)
    s_kv = shapes[r["k"]][r["k_perm"][-2]]  # the kv sequence at the target
    s_q = shapes[r["q"]][r["q_perm"][-2]]
    d, dv = shapes[r["q"]][r["q_perm"][-1]], shapes[r["v"]][r["v_perm"][-1]]
    g = math.prod(shapes[r["q"]][a] for a in r["q_perm"][r["n_batch"] : n_lead])

    def vmem(c: Mapping[str, Any], _: Mapping[str, int]) -> int:
        bq, bkv = min(int(c["block_q"]), s_q), min(int(c["block_kv"]), s_kv)
        heads = g if tr else 1  # the row layout walks the query heads on the grid
        tiles = 2 * 2 * (heads * bq * (d + dv) + bkv * (d + dv))  # q, out, k, v: bf16, double-buffered
        tiles += 2 * 4 * bq * bkv if b is not None or m is not None else 0  # a bias or mask tile
        return tiles + 4 * heads * bq * (dv + 2 * 8) + 4 * 4 * bq * bkv  # f32 scratch, f32 score tiles

    def problems(c: Mapping[str, Any], d: Mapping[str, int]) -> list[str]:
        return [
            f"{k}={c[k]} is not one of {list(BLOCKS)}" for k in ("block_q", "block_kv") if c[k] not in BLOCKS
        ]

    def cost(c: Mapping[str, Any], _: Mapping[str, int]) -> float:
        # every grid step pays its overhead (0.35 us) and the loop's own bundles (~0.12 us); a step that
        # computes (on or below the diagonal when causal) pays 0.19 us, and per query head 0.12 us (its
        # running max and sum) plus 1.8 ps a score at D = 128. Fitted on the llo of 1p's row-tile kernel
        # (881 bundles an average step at 512 x 512, 2542 at 1024 x 1024: 8240 and 5948 us) and 2p's 16
        # heads a step (9517 and 35241: 12820 and 11996 us), so the triangle's skipped blocks do not buy
        # 512-wide blocks there
        bq, bkv = min(int(c["block_q"]), s_q), min(int(c["block_kv"]), s_kv)
        nq, nk = math.ceil(s_q / bq), math.ceil(s_kv / bkv)
        taken = sum(min((qi * bq + bq - 1) // bkv + 1, nk) for qi in range(nq)) if r["causal"] else nq * nk
        passes = 2 if r["two_pass"] else 1
        tile_us = 0.19 + g * (0.12 + bq * bkv * 1.8e-6 * (d + dv) / 256)
        return passes * (0.47 * nq * nk + taken * tile_us) + (1e6 if vmem(c, {}) > 48 * MiB else 0.0)

    # one kv block when the whole sequence fits one (no rescaling across blocks): Gemma 2's attention at
    # 1024 tokens on v5e, llo: 69.8 -> 64.8 us (local), 67.1 -> 62.1 us (global) against 512-wide blocks;
    # there 512-wide q blocks still beat one 1024 block (51.9 vs 53.0 us local, 48.2 vs 49.2 global: two
    # steps a batch row let the pipeline hide a fetch), which `cost` does not see. Otherwise the cheapest
    # pair by `cost`: 1024 x 1024 for JaxBench's 1p, 2p, 4p and 5p
    configs = [{"block_q": q, "block_kv": k} for q in BLOCKS for k in BLOCKS]
    if s_kv <= 1024:
        configs = [{"block_q": 512, "block_kv": 1024}]
    first = min(configs, key=lambda c: (cost(c, {}), -c["block_q"], -c["block_kv"]))

    return Template(
        name="flash_program",
        operators=("program",),
        source=SOURCE_R if rows else SOURCE_T if tr else SOURCE,
        tunables={"block_q": BLOCKS, "block_kv": BLOCKS},
        dims_of=lambda sizes: {},
        problems=problems,
        vmem_bytes=vmem,
        cost_us=cost,
        initial=first,
        fixed=lambda op: fixed,
        constraints=("block_q, block_kv multiples of 128 (clamped to the sequence length)",),
        grid_axes=lambda c: ["batch", "q", "kv"] if tr else ["batch", "groups", "q", "kv"],
        semantics=lambda c: (
            ["parallel", "parallel", "arbitrary"] if tr else ["parallel", "parallel", "parallel", "arbitrary"]
        ),
    )
