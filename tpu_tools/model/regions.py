"""Break a flat model step into regions: the user's boundaries first, else groups found by pattern.

A region instance is a contiguous run of equations. Where the user drew boundaries (named scopes,
nested user functions under jit or custom_vjp/jvp: problem/program.py records them as each equation's
scope), a region is one innermost scope, one call at a time. Equations outside every boundary are
grouped by pattern: attention (a matmul whose result reaches a second matmul through an exp), matmul
plus its elementwise epilogue, norm (a reduction feeding an rsqrt), softmax, reduction, data movement
(gather, scatter, sort), elementwise. Instances with the same signature (ops, parameters, shapes,
dtypes) merge into one region with a count: 32 identical layers give one attention region x 32.
"""

from __future__ import annotations

import collections
import hashlib
import math
import re
from collections.abc import Sequence

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.model.flat import FlatProgram
from maxkernel.tpu_tools.problem.program import Equation, TensorSpec

MATMUL = {"dot_general", "conv_general_dilated", "ragged_dot_general"}
REDUCTION = {"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin", "reduce_and",
             "reduce_or", "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"}  # fmt: skip
MOVEMENT = {"gather", "scatter", "scatter-add", "scatter_add", "sort", "top_k", "dynamic_slice",
            "dynamic_update_slice"}  # fmt: skip
# A loop left as one equation (a while with a dynamic trip count; a scan over time, whose body has no
# matmul, or a layer stack too long to unroll): its body is invisible at this level, so it is a region of
# its own (kind "recurrence" for a scan, "loop" for a while), never named by what surrounds it.
LOOPS = {"while", "scan"}
# Equations that compute nothing: they never start a group on their own.
SHAPE_ONLY = {"reshape", "broadcast_in_dim", "squeeze", "expand_dims", "transpose", "convert_element_type",
              "iota", "slice", "concatenate", "split", "stop_gradient", "copy", "copy_p"}  # fmt: skip


class RegionInstance(BaseModel):
    """One occurrence of a region: equations [start, stop) of the flat step."""

    index: int
    name: str = Field(description="the user's scope (attention/sdpa), or the pattern and its ordinal")
    boundary: str = Field(description="scope (the user's) | pattern (found here)")
    kind: str = Field(
        description="attention | matmul_epilogue | norm | softmax | reduction | movement | elementwise | "
        "recurrence (a scan over time) | loop (a while)"
    )
    start: int
    stop: int
    inputs: list[str] = Field(description="values it reads that are made outside it (or step inputs)")
    outputs: list[str] = Field(description="values it makes that are read after it (or step outputs)")
    signature: str


class Region(BaseModel):
    """Instances with one signature, merged."""

    id: str = Field(
        description="stable id: the name as a slug (layers covered as layer_{0,2}), + a word telling apart "
        "regions with one name (their kind, a primitive only one has: .with_cond)"
    )
    name: str
    boundary: str
    kind: str
    count: int
    instances: list[int] = Field(description="RegionInstance indices")
    origin: list[str] = Field(description="scopes and source lines (file:line (function)) it comes from")
    ops: dict[str, int] = Field(description="primitive -> count, one instance")
    input_specs: list[TensorSpec]
    output_specs: list[TensorSpec]
    flops: float = Field(description="matmul/conv flops of one instance, counted from the jaxpr")
    transcendentals: float = 0.0
    io_bytes: int = Field(description="bytes of one instance's inputs and outputs: a fused kernel's floor")
    signature: str
    extractable: bool = Field(True, description="`extract` can write it as plain JAX")
    extract_note: str = Field("", description="why it cannot be extracted, when it cannot")
    composable: bool = Field(
        True, description="`compose` can write the rest of the step around a kernel for it"
    )
    compose_note: str = Field("", description="why it cannot be composed, when it cannot")


def _spec_of(flat: FlatProgram, name: str) -> TensorSpec | None:
    return _specs(flat).get(name)


def _specs(flat: FlatProgram) -> dict[str, TensorSpec]:
    cache = getattr(flat, "_spec_cache", None)
    if cache is None:
        cache = dict(zip(flat.program.input_names, flat.program.inputs, strict=True))
        for e in flat.equations:
            cache.update(zip(e.outputs, e.out_specs, strict=True))
        flat._spec_cache = cache  # type: ignore[attr-defined]
    return cache


def _nbytes(spec: TensorSpec) -> int:
    from maxkernel.tpu_tools.cost.block_schedule import itemsize

    return int(math.prod(spec.shape)) * itemsize(spec.dtype)


def eqn_flops(eqn, flat_raw) -> tuple[float, float]:
    """(matmul/conv flops, transcendentals) of one jax equation."""
    from maxkernel.tpu_tools.cost.jaxpr_cost import TRANSCENDENTAL, _conv_flops, _dot_flops, _size

    name = eqn.primitive.name
    if name == "dot_general":
        return _dot_flops(eqn), 0.0
    if name == "conv_general_dilated":
        return _conv_flops(eqn), 0.0
    if name == "ragged_dot_general":  # every row meets one group's [k, n] matrix
        lhs, rhs = eqn.invars[0].aval, eqn.invars[1].aval
        k = lhs.shape[-1]
        return 2.0 * _size(lhs) / max(1, k) * k * rhs.shape[-1], 0.0
    if name in TRANSCENDENTAL:
        return 0.0, float(_size(eqn.outvars[0].aval))
    return 0.0, 0.0


# ------------------------------------------------------------------ partition


def module_scope(scope: str) -> str:
    """A Flax module's method call scoped inside the module (conv_1d/conv_1d._pad_window) is the module's own
    region: Griffin's Conv1D was 16 regions, one per helper call of each of its taps."""
    parts = scope.split("/")
    keep = [p for k, p in enumerate(parts) if not (k and p.startswith(parts[k - 1] + "."))]
    return "/".join(keep)


def _runs(flat: FlatProgram) -> list[tuple[str, int, int]]:
    """Contiguous runs of equations with one (scope, call path): (scope, start, stop)."""
    runs: list[tuple[str, int, int]] = []
    key_prev = None
    for i, e in enumerate(flat.equations):
        scope = module_scope(e.scope)
        key = (scope, flat.raw[i][2])
        if key != key_prev:
            runs.append((scope, i, i + 1))
            key_prev = key
        else:
            s, a, _ = runs[-1]
            runs[-1] = (s, a, i + 1)
    return runs


def _attention_members(eqns: Sequence[Equation], lo: int, hi: int) -> dict[int, int]:
    """Equations of [lo, hi) inside an attention: index -> the first matmul's index.

    A second matmul reached from a first one through non-matmul equations, one of them an exp, makes
    the pair and the equations between them one attention; the masks and scales feeding those
    (built only from constants and iotas) join it."""
    producer: dict[str, int] = {}
    for i in range(lo, hi):
        for o in eqns[i].outputs:
            producer[o] = i
    # reach[name] = {first matmul index: an exp seen on the way}
    reach: dict[str, dict[int, bool]] = {}
    const_only: set[str] = set()
    members: dict[int, int] = {}
    for i in range(lo, hi):
        e = eqns[i]
        vars_in = [a for a in e.inputs if not a.startswith("lit:")]
        if all(a in const_only for a in vars_in) and e.primitive not in MATMUL:
            const_only.update(e.outputs)
        if e.primitive in MATMUL:
            for a in vars_in:
                for d1, exp_seen in reach.get(a, {}).items():
                    if exp_seen and d1 not in members:
                        _mark_path(eqns, producer, d1, i, members, const_only)
            for o in e.outputs:
                reach[o] = {i: False}
            continue
        merged: dict[int, bool] = {}
        for a in vars_in:
            for d1, seen in reach.get(a, {}).items():
                merged[d1] = merged.get(d1, False) or seen
        if e.primitive in ("exp", "exp2"):
            merged = {d: True for d in merged}
        for o in e.outputs:
            reach[o] = merged
    return members


def _mark_path(eqns, producer, d1: int, d2: int, members: dict[int, int], const_only: set[str]) -> None:
    """Mark d2, d1 and every equation between them on a path from d1 to d2 (plus their constant feeds)."""
    stack, seen = [d2], set()
    while stack:
        j = stack.pop()
        if j in seen or j < d1:
            continue
        seen.add(j)
        for a in eqns[j].inputs:
            p = producer.get(a)
            if p is None:
                continue
            if p >= d1 and (p == d1 or eqns[p].primitive not in MATMUL):
                stack.append(p)
            elif a in const_only:
                stack.append(p)
    for j in seen:
        members.setdefault(j, d1)


def _step_kind(prim: str) -> str:
    if prim in LOOPS:
        return "loop"
    if prim in MATMUL:
        return "matmul"
    if prim in REDUCTION:
        return "reduce"
    if prim in MOVEMENT:
        return "movement"
    if prim in SHAPE_ONLY:
        return "shape"
    return "elementwise"


def _pattern_groups(eqns: Sequence[Equation], lo: int, hi: int) -> list[tuple[int, int]]:
    """Split [lo, hi) (no user boundaries) into contiguous groups by pattern."""
    attn = _attention_members(eqns, lo, hi)
    groups: list[list[int]] = []
    cur_kind: str | None = None
    for i in range(lo, hi):
        k = "attention" if i in attn else _step_kind(eqns[i].primitive)
        if not groups:
            groups.append([i, i + 1])
            cur_kind = k
            continue
        start_new = False
        if k == "loop":
            start_new = True
        elif cur_kind == "loop":
            start_new = k != "shape"
        elif k == "attention":
            start_new = cur_kind != "attention"
        elif cur_kind == "attention":
            # equations inside the attention's span that are not on its path (a reshape of v) stay in
            nxt = [j for j in range(i + 1, hi) if j in attn]
            start_new = not nxt or (k in ("matmul", "reduce", "movement"))
        elif k == "matmul":
            start_new = cur_kind != "shape" or _group_has(eqns, groups[-1], MATMUL | REDUCTION | MOVEMENT)
        elif k == "reduce":
            start_new = cur_kind not in ("reduce", "shape") and not _group_is_norm_prefix(eqns, groups[-1])
        elif k == "movement":
            start_new = cur_kind != "movement" and cur_kind != "shape"
        if start_new:
            groups.append([i, i + 1])
            cur_kind = k
        else:
            groups[-1][1] = i + 1
            if k != "shape" and cur_kind in (None, "shape"):
                cur_kind = k
            elif k in ("matmul", "reduce", "movement", "attention", "loop"):
                cur_kind = k
    return [(a, b) for a, b in groups]


def _group_has(eqns, g, prims) -> bool:
    return any(eqns[j].primitive in prims for j in range(g[0], g[1]))


def _group_is_norm_prefix(eqns, g) -> bool:
    """A group that is a reduction in progress (mean then variance) keeps the next reduction."""
    return _group_has(eqns, g, REDUCTION) and not _group_has(eqns, g, MATMUL | MOVEMENT)


def classify(eqns: Sequence[Equation]) -> str:
    prims = collections.Counter(e.primitive for e in eqns)
    if prims["scan"]:  # a recurrence over time (a layer stack is unrolled before this): a Pallas target
        return "recurrence"
    if prims["while"]:
        return "loop"
    n_mm = sum(prims[p] for p in MATMUL)
    if n_mm >= 2 and (prims["exp"] or prims["exp2"]) and prims["reduce_max"] + prims["reduce_sum"]:
        return "attention"
    if n_mm:
        return "matmul_epilogue" if len(eqns) > n_mm else "matmul"
    if prims["rsqrt"] or (prims["sqrt"] and prims["div"]):
        return "norm"
    if (prims["exp"] or prims["exp2"]) and prims["reduce_sum"]:
        return "softmax"
    if any(p in MOVEMENT for p in prims):
        return "movement"
    if any(p in REDUCTION for p in prims):
        return "reduction"
    if all(p in SHAPE_ONLY for p in prims):
        return "layout"
    return "elementwise"


def _signature(flat: FlatProgram, a: int, b: int, inputs: Sequence[str]) -> str:
    """Structure, parameters, shapes and dtypes of [a, b), with values renamed by first use."""
    names: dict[str, str] = {n: f"i{k}" for k, n in enumerate(inputs)}
    parts = []
    specs = _specs(flat)
    for e in flat.equations[a:b]:
        for o in e.outputs:
            names[o] = f"t{len(names)}"
        ins = [a_ if a_.startswith("lit:") else names.get(a_, "?") for a_ in e.inputs]
        parts.append(
            f"{e.primitive}({','.join(ins)}){sorted(e.params.items())}->{[s.model_dump() for s in e.out_specs]}"
        )
    parts.append(str([specs[n].model_dump() for n in inputs]))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _io(flat: FlatProgram, a: int, b: int, readers: dict[str, list[int]]) -> tuple[list[str], list[str]]:
    made: set[str] = set()
    ins: list[str] = []
    for e in flat.equations[a:b]:
        for x in e.inputs:
            if not x.startswith("lit:") and x not in made and x not in ins:
                ins.append(x)
        made.update(e.outputs)
    step_outs = set(flat.program.outputs)
    outs = [
        o
        for e in flat.equations[a:b]
        for o in e.outputs
        if o in step_outs or any(r >= b for r in readers.get(o, []))
    ]
    return ins, outs


def instances(flat: FlatProgram) -> list[RegionInstance]:
    """The step's region instances, in program order (every equation in exactly one)."""
    eqns = flat.equations
    readers: dict[str, list[int]] = collections.defaultdict(list)
    for i, e in enumerate(eqns):
        for x in e.inputs:
            readers[x].append(i)
    spans: list[tuple[str, str, int, int]] = []  # (boundary, name, start, stop)
    ordinal: collections.Counter[str] = collections.Counter()
    for scope, a, b in _runs(flat):
        if scope:
            spans.append(("scope", scope, a, b))
            continue
        for ga, gb in _pattern_groups(eqns, a, b):
            kind = classify(eqns[ga:gb])
            ordinal[kind] += 1
            spans.append(("pattern", f"{kind}.{ordinal[kind]}", ga, gb))
    out = []
    for k, (boundary, name, a, b) in enumerate(spans):
        ins, outs = _io(flat, a, b, readers)
        out.append(
            RegionInstance(
                index=k,
                name=name,
                boundary=boundary,
                kind=classify(eqns[a:b]),
                start=a,
                stop=b,
                inputs=ins,
                outputs=outs,
                signature=_signature(flat, a, b, ins),
            )
        )
    return out


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.{},+\-]+", ".", name).strip(".") or "region"


def merge(flat: FlatProgram, insts: Sequence[RegionInstance]) -> list[Region]:
    """One Region per signature, in order of first appearance; ids are unique slugs."""
    by_sig: dict[str, list[RegionInstance]] = {}
    for r in insts:
        by_sig.setdefault(r.signature, []).append(r)
    specs = _specs(flat)
    regions: list[Region] = []
    functions: dict[int, dict[str, str]] = {}  # per region: primitive -> the function its first eqn is in
    unwritable = _unwritable(flat)
    for sig, group in by_sig.items():
        first = group[0]
        names = list(dict.fromkeys(g.name for g in group))
        # a numbered pattern name (matmul_epilogue.3) keeps its first number; a scope keeps its path
        rid = _slug(_common_name(names))  # made unique by assign_ids below
        eqs = flat.equations[first.start : first.stop]
        flops = trans = 0.0
        for i in range(first.start, first.stop):
            f, t = eqn_flops(flat.raw[i][0], flat.raw)
            flops, trans = flops + f, trans + t
        origin = list(dict.fromkeys([*names, *(e.source for e in eqs if e.source)]))[:8]
        in_specs = [specs[n] for n in first.inputs]
        out_specs = [specs[n] for n in first.outputs]
        inside = {i for g in group for i in range(g.start, g.stop)}
        own = sorted({w for i, w in unwritable.items() if first.start <= i < first.stop})
        rest = sorted({w for i, w in unwritable.items() if i not in inside})
        regions.append(
            Region(
                id=rid,
                name=_common_name(names),
                boundary=first.boundary,
                kind=first.kind,
                count=len(group),
                instances=[g.index for g in group],
                origin=origin,
                ops=dict(collections.Counter(e.primitive for e in eqs)),
                input_specs=in_specs,
                output_specs=out_specs,
                flops=flops,
                transcendentals=trans,
                io_bytes=sum(_nbytes(s) for s in (*in_specs, *out_specs)),
                signature=sig,
                extractable=not own,
                extract_note=f"the emitter has no plain-JAX form for {', '.join(own)}" if own else "",
                composable=not rest,
                compose_note=f"the rest of the step has {', '.join(rest)}, which the emitter cannot write"
                if rest
                else "",
            )
        )
        functions[id(regions[-1])] = {}
        for e in eqs:
            m = re.search(r"\(([^()]*)\)\s*$", e.source or "")
            if m:
                functions[id(regions[-1])].setdefault(e.primitive, m.group(1))
    assign_ids(regions, functions)
    return regions


def _unwritable(flat: FlatProgram) -> dict[int, str]:
    """Equation index -> what the plain-JAX emitter cannot write in it (a primitive, an array constant)."""
    from maxkernel.tpu_tools.problem.emit import unsupported_ops

    out: dict[int, str] = {}
    for i, e in enumerate(flat.equations):
        d = e.model_dump()
        bad = unsupported_ops({"equations": [d], "census": {e.primitive: 1}}, mosaic=False)
        if bad:
            out[i] = bad[0]
        elif "lit:None" in str(d):
            out[i] = f"an array constant (in {e.primitive})"
    return out


def _numbers(nums: Sequence[int]) -> str:
    """{0,2} or {0-3}: the layer numbers a merged region covers."""
    ns = sorted(set(nums))
    if len(ns) > 2 and ns == list(range(ns[0], ns[-1] + 1)):
        return f"{{{ns[0]}-{ns[-1]}}}"
    return "{" + ",".join(map(str, ns)) + "}"


def _column(values: Sequence[str]) -> str:
    """One path component across a merged region's instances: itself, its numbers as a set (layer_{0,2}),
    or the distinct words ({pre_attention_norm,post_ffw_norm,+2})."""
    distinct = list(dict.fromkeys(values))
    if len(distinct) == 1:
        return distinct[0]
    templates = {re.sub(r"\d+", "#", v) for v in distinct}
    if len(templates) == 1 and templates.pop().count("#") == 1:
        nums = [int(re.search(r"\d+", v).group()) for v in distinct]  # type: ignore[union-attr]
        return re.sub(r"\d+", lambda _: _numbers(nums), distinct[0], count=1)
    shown = distinct[:2]
    return "{" + ",".join(shown) + (f",+{len(distinct) - 2}" if len(distinct) > 2 else "") + "}"


def _common_name(names: Sequence[str]) -> str:
    """layer_0/attn and layer_2/attn -> layer_{0,2}/attn; paths of different depths are named depth by
    depth, joined with +; one name stays as it is."""
    if len(names) == 1:
        return names[0]
    by_depth: dict[int, list[list[str]]] = {}
    for n in names:
        by_depth.setdefault(len(n.split("/")), []).append(n.split("/"))
    return "+".join("/".join(_column(col) for col in zip(*parts, strict=True)) for parts in by_depth.values())


def _variant_words(
    regions: Sequence[Region], functions: dict[int, dict[str, str]] | None = None
) -> list[str]:
    """A word per region that tells apart regions with one name: its kind where kinds differ, else what
    only it computes, named by the library function that writes those ops where one does (Gemma 2's
    local attention: `sliding_mask`, from `_create_sliding_mask`; its global one: `no_sliding_mask`), else
    a primitive only it has (`with_cond`), else its shapes."""
    functions = functions or {}
    words = []
    for r in regions:
        others = [o for o in regions if o is not r]
        if all(o.kind != r.kind for o in others):
            words.append(r.kind)
            continue
        mine = [p for p in r.ops if all(p not in o.ops for o in others)]
        if mine:
            fn = _function_word(mine, functions.get(id(r), {}))
            words.append(fn or "with_" + sorted(mine)[0])
            continue
        theirs = sorted({p for o in others for p in o.ops if p not in r.ops})
        if theirs:
            fns = [_function_word(theirs, functions.get(id(o), {})) for o in others]
            fn = next((f for f in fns if f), "")
            words.append("no_" + (fn or theirs[0]))
            continue
        shape = "x".join(map(str, r.input_specs[0].shape)) if r.input_specs else ""
        words.append(shape or "variant")
    if len(set(words)) < len(words):  # still ambiguous: number them
        words = [f"{w}{k + 1}" for k, w in enumerate(words)]
    return words


_VERBS = re.compile(r"^(create|make|build|get|compute|apply|do|calc|calculate)_")


def _function_word(ops: Sequence[str], functions: dict[str, str]) -> str:
    """The library function most of `ops` are written in, as a word (`_create_sliding_mask` ->
    `sliding_mask`); "" where none is named or it is a method's call (`Attention.__call__`)."""
    names = [functions[p] for p in ops if functions.get(p)]
    if not names:
        return ""
    best = collections.Counter(names).most_common(1)[0][0]
    word = best.rsplit(".", 1)[-1].strip("_")
    if not word or word.startswith("call") or word in ("init", "lambda", "<lambda>"):
        return ""
    word = _VERBS.sub("", word.lower())
    return re.sub(r"[^a-z0-9_]+", "_", word).strip("_")


def _family(slug: str) -> str:
    """A slug with the layer numbers of every component but its last collapsed: layer_{0,2}.attn and
    layer_{1,3}.attn are one family (variants of a layer), mlp.Einsum_0 and mlp.Einsum_1 are not."""
    parts = slug.split(".")
    return ".".join([re.sub(r"\{[^}]*\}|\d+", "#", p) for p in parts[:-1]] + parts[-1:])


def matching_id(ids: Sequence[str], rid: str) -> str | None:
    """The id `rid` names: itself, or the one id it is a prefix of up to a variant word
    (`Transformer.layer_{0,2}.attn` for `Transformer.layer_{0,2}.attn.sliding_mask`); None if none or
    several."""
    if rid in ids:
        return rid
    hits = [i for i in ids if i.startswith(rid + ".") and "." not in i[len(rid) + 1 :]]
    return hits[0] if len(hits) == 1 else None


def assign_ids(regions: list[Region], functions: dict[int, dict[str, str]] | None = None) -> None:
    """Ids from names (slugs); regions sharing a name get the word that tells them apart appended, and so
    do variants of one layer that differ only by the layers they cover where what they compute differs
    (`functions`: per region (by id()), the function each primitive's first equation is written in)."""
    by_slug: dict[str, list[Region]] = {}
    for r in regions:
        by_slug.setdefault(_slug(r.name), []).append(r)
    for slug, group in by_slug.items():
        if len(group) == 1:
            group[0].id = slug
            continue
        for r, w in zip(group, _variant_words(group, functions), strict=True):
            r.id = f"{slug}.{w}"
    by_family: dict[str, list[Region]] = {}
    for r in regions:
        by_family.setdefault(_family(r.id), []).append(r)
    for group in by_family.values():
        if len(group) < 2 or len({r.id for r in group}) < len(group) or len({r.kind for r in group}) > 1:
            continue
        words = _variant_words(group, functions)
        if all(not re.fullmatch(r"[\dx]*\d+|variant\d*", w) for w in words):  # ops tell them apart
            for r, w in zip(group, words, strict=True):
                r.id = f"{r.id}.{w}"
