"""A traced program cut into stages at the values that must reach HBM anyway.

A batched contraction between two computed values (AlphaFold's triangle update: `einsum("ikc,jkc->ijc")`
of two gated projections) needs all of both operands for every output block, so no row tiling of the
program can hold it with its producers or its consumers: the operands go to HBM between kernels whatever
writes them. `cut` splits the program there into three programs of their own (subprogram.py): the
equations the contraction's operands come from (the head), the contraction alone (the pivot), and the
rest (the tail), each to be written by the template that serves it. The pivot is put in the form a
batched matmul reads, `[batch, M, K] x [batch, N, K]`: the glue between stages moves its operands there
(a transpose an expert would also do), and a transpose the tail opens with on a stage boundary value is
done by the glue too, so the tail reads the value as its rows lie.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from maxkernel.clients.offline.subprogram import _spec, subprogram, with_unit_axes

Program = Mapping[str, Any]


@dataclass(frozen=True)
class Move:
    """A layout move the glue does in plain JAX before a stage: `out = jnp.transpose(src, perm)`."""

    out: str
    src: str
    perm: tuple[int, ...]


@dataclass(frozen=True)
class Stage:
    """One program of the cut, written by its own template; `role` is head, pivot or tail."""

    role: str
    program: dict[str, Any]  # inputs are the parent's values (or the moves' outputs), outputs likewise
    moves: tuple[Move, ...] = ()  # done by the glue before this stage
    outputs: tuple[str, ...] = ()  # the parent's names of its outputs (before with_unit_axes renames them)
    unit: list[int] = field(default_factory=list)  # outputs given two trailing unit axes (with_unit_axes)


def _dims(e: Mapping[str, Any]) -> tuple[tuple[int, ...], ...]:
    (lc, rc), (lb, rb) = ast.literal_eval(e["params"]["dimension_numbers"])
    return tuple(lc), tuple(rc), tuple(lb), tuple(rb)


def _rank(program: Program, name: str) -> int:
    return len(_spec(program, name, None)["shape"])


def pivot(program: Program) -> int | None:
    """The first dot_general with batch axes whose operands are not both inputs, each operand one free
    axis and one contracted axis beside its batch axes (a batched matmul once moved); None when none."""
    names = set(program["input_names"])
    for i, e in enumerate(program["equations"]):
        if e["primitive"] != "dot_general" or len(e["inputs"]) != 2:
            continue
        lhs, rhs = e["inputs"]
        if lhs == rhs or (lhs in names and rhs in names) or lhs.startswith("lit:") or rhs.startswith("lit:"):
            continue
        lc, rc, lb, rb = _dims(e)
        nb = len(lb)
        if nb and len(lc) == 1 and _rank(program, lhs) == nb + 2 and _rank(program, rhs) == nb + 2:
            return i
    return None


def _fresh(taken: set[str], base: str) -> str:
    new = next(f"{base}_{i}" for i in range(len(taken) + 1) if f"{base}_{i}" not in taken)
    taken.add(new)
    return new


def _permute(spec: Mapping[str, Any], perm: Sequence[int]) -> dict[str, Any]:
    return {**spec, "shape": [spec["shape"][p] for p in perm]}


def _moved(program: dict[str, Any], moves: Sequence[Move]) -> dict[str, Any]:
    """`program` (reading each move's `src`) reading the moves' outputs instead, shapes permuted at
    every size."""
    by_src = {m.src: m for m in moves}
    names = [by_src[n].out if n in by_src else n for n in program["input_names"]]

    def specs(inputs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [
            _permute(s, by_src[n].perm) if n in by_src else dict(s)
            for n, s in zip(program["input_names"], inputs, strict=True)
        ]

    eqns = [
        {**e, "inputs": [by_src[a].out if a in by_src else a for a in e["inputs"]]}
        for e in program["equations"]
    ]
    variants = {
        size: v if v.get("mismatch") else {**v, "inputs": specs(v["inputs"])}
        for size, v in (program.get("variants") or {}).items()
    }
    return {
        **program,
        "input_names": names,
        "inputs": specs(program["inputs"]),
        "equations": eqns,
        "variants": variants,
    }


def _pivot_stage(program: Program, p: int, taken: set[str], swap: bool = False) -> Stage:
    """The contraction alone, its operands moved to [batch..., free, contracted] (the right one [N, K]);
    `swap` writes it with its operands swapped, so its output is the dot's with the last two axes swapped
    (a fresh name): the tail then reads rows that lie on a major axis, not on the lanes."""
    e = program["equations"][p]
    lhs, rhs = e["inputs"]
    lc, rc, lb, rb = _dims(e)
    nb = len(lb)
    moves = []
    for name, b, c in ((lhs, lb, lc), (rhs, rb, rc)):
        free = [a for a in range(nb + 2) if a not in b and a not in c]
        perm = (*b, *free, *c)
        if perm != tuple(range(nb + 2)):
            moves.append(Move(out=_fresh(taken, name), src=name, perm=perm))
    operands = [rhs, lhs] if swap else [lhs, rhs]
    sub = _moved(subprogram(program, [p], operands, e["outputs"]), moves)
    batch = tuple(range(nb))
    dn = str(((((nb + 1),), ((nb + 1),)), (batch, batch)))
    out = e["outputs"][0]
    eqn = {**sub["equations"][0], "params": {**e["params"], "dimension_numbers": dn}}
    if swap:
        s = (*batch, nb + 1, nb)
        out = _fresh(taken, out)
        eqn = {
            **eqn,
            "inputs": eqn["inputs"][::-1],  # the moved right operand first, as the program reads them
            "outputs": [out],
            "out_specs": [_permute(eqn["out_specs"][0], s)],
        }
        sub["outputs"] = [out]
        sub["out_specs"] = [_permute(sub["out_specs"][0], s)]
    sub["equations"] = [eqn]
    for v in sub["variants"].values():
        if v.get("mismatch"):
            continue
        if "0" in (v.get("params") or {}) and "dimension_numbers" in v["params"]["0"]:
            v["params"] = {**v["params"], "0": {**v["params"]["0"], "dimension_numbers": dn}}
        if swap:
            v["out_specs"] = [_permute(v["out_specs"][0], s)]
            if "0" in (v.get("shapes") or {}):
                v["shapes"] = {**v["shapes"], "0": [[v["shapes"]["0"][0][d] for d in s]]}
    return Stage(role="pivot", program=sub, moves=tuple(moves), outputs=(out,))


def _reads(program: Program, indices: Sequence[int]) -> list[str]:
    """Values the equations at `indices` read but do not make, in first-read order."""
    made: set[str] = set()
    out: list[str] = []
    for i in indices:
        e = program["equations"][i]
        for a in e["inputs"]:
            if not a.startswith("lit:") and a not in made and a not in out:
                out.append(a)
        made |= set(e["outputs"])
    return out


def producers(program: Program) -> dict[str, int]:
    """Each value an equation makes: that equation's index."""
    return {o: i for i, e in enumerate(program["equations"]) for o in e["outputs"]}


def upstream(program: Program, values: Sequence[str], made_by: Mapping[str, int]) -> set[int]:
    """The equations `values` are computed from, transitively (inputs and literals end the walk)."""
    eqns = program["equations"]
    found: set[int] = set()
    todo = [a for a in values if a in made_by]
    while todo:
        i = made_by[todo.pop()]
        if i not in found:
            found.add(i)
            todo += [a for a in eqns[i]["inputs"] if a in made_by]
    return found


def _tail_stage(program: Program, indices: list[int], outputs: Sequence[str]) -> Stage:
    """The rest of the program; a transpose of a value it reads from outside is the glue's move."""
    eqns = program["equations"]
    outside = set(_reads(program, indices))
    moves, keep = [], []
    for i in indices:
        e = eqns[i]
        if e["primitive"] == "transpose" and e["inputs"][0] in outside and e["outputs"][0] not in outputs:
            perm = tuple(ast.literal_eval(e["params"]["permutation"]))
            moves.append(Move(out=e["outputs"][0], src=e["inputs"][0], perm=perm))
            continue
        keep.append(i)
    ins = _reads(program, keep)
    sub = subprogram(program, keep, ins, list(outputs))
    tail, unit = with_unit_axes(sub)
    return Stage(role="tail", program=tail, moves=tuple(moves), outputs=tuple(outputs), unit=unit)


def cut(program: Program) -> list[Stage] | None:
    """The program as its head, pivot and tail stages (a stage with no equations left out), or None when
    it has no pivot or returns an input as it is."""
    p = pivot(program)
    if p is None:
        return None
    eqns = program["equations"]
    made_by = producers(program)
    head = upstream(program, eqns[p]["inputs"], made_by)
    head_idx = sorted(head)
    rest = [i for i in range(len(eqns)) if i != p and i not in head]
    outputs = list(program["outputs"])
    if any(o not in made_by for o in outputs):
        return None  # an input returned as it is: not worth a stage
    taken = {o for e in eqns for o in e["outputs"]} | set(program["input_names"])
    stages: list[Stage] = []
    if head_idx:
        needed = set(eqns[p]["inputs"]) | set(_reads(program, rest)) | set(outputs)
        head_out = [o for i in head_idx for o in eqns[i]["outputs"] if o in needed]
        sub, unit = with_unit_axes(subprogram(program, head_idx, _reads(program, head_idx), head_out))
        stages.append(Stage(role="head", program=sub, outputs=tuple(head_out), unit=unit))
    pivot_out = eqns[p]["outputs"][0]
    tail_out = [o for o in outputs if made_by[o] in rest]
    tail = _tail_stage(program, rest, tail_out) if tail_out else None
    last = _rank(program, pivot_out) - 1
    rows_on_lanes = [m for m in (tail.moves if tail else ()) if m.src == pivot_out and m.perm[0] == last]
    if (
        rows_on_lanes
        and pivot_out not in outputs
        and len(rows_on_lanes) == len([m for m in tail.moves if m.src == pivot_out])
        and pivot_out not in tail.program["input_names"]
    ):
        piv = _pivot_stage(program, p, taken, swap=True)
        s = (*range(last - 1), last, last - 1)
        moves = tuple(
            Move(out=m.out, src=piv.outputs[0], perm=tuple(s[d] for d in m.perm)) if m.src == pivot_out else m
            for m in tail.moves
        )
        tail = Stage(role="tail", program=tail.program, moves=moves, outputs=tail.outputs, unit=tail.unit)
    else:
        piv = _pivot_stage(program, p, taken)
    stages.append(piv)
    if tail is not None:
        stages.append(tail)
    return stages


# ---------------------------------------------------------------------------------------------------
# An attention block with its projections (MLA, a transformer layer's attention): every matmul a kernel


def _users(program: Program) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, e in enumerate(program["equations"]):
        for a in e["inputs"]:
            out.setdefault(a, []).append(i)
    return out


def attention_region(program: Program, p: int, is_attention) -> list[int] | None:
    """The equations of the attention whose scores contraction is equation `p`: from it through the next
    contraction its softmax feeds (p·v), the equations that follow from no input (a causal mask from
    iotas), and transposes that alone read its result; None unless `is_attention(subprogram)` says so."""
    eqns = program["equations"]
    made_by = producers(program)
    after = {p}
    for i in range(p + 1, len(eqns)):
        if any(made_by.get(a) in after for a in eqns[i]["inputs"]):
            after.add(i)
    second = next((i for i in sorted(after) if i != p and eqns[i]["primitive"] == "dot_general"), None)
    if second is None:
        return None
    region: set[int] = set()
    todo = [second]
    while todo:  # between the two contractions: what the second reads that follows from the first
        i = todo.pop()
        if i not in region:
            region.add(i)
            todo += [made_by[a] for a in eqns[i]["inputs"] if made_by.get(a) in after]
    free: dict[int, bool] = {}

    def input_free(i: int) -> bool:
        if i not in free:
            free[i] = all(
                a.startswith("lit:") or (a in made_by and input_free(made_by[a])) for a in eqns[i]["inputs"]
            )
        return free[i]

    todo = [made_by[a] for i in region for a in eqns[i]["inputs"] if a in made_by]
    while todo:
        i = todo.pop()
        if i not in region and input_free(i):
            region.add(i)
            todo += [made_by[a] for a in eqns[i]["inputs"] if a in made_by]
    users, out = _users(program), eqns[second]["outputs"][0]
    while len(users.get(out, [])) == 1 and eqns[users[out][0]]["primitive"] == "transpose":
        if out in program["outputs"]:
            break
        region.add(users[out][0])
        out = eqns[users[out][0]]["outputs"][0]
    idx = sorted(region)
    if any(o in program["outputs"] for i in idx for o in eqns[i]["outputs"] if o != out):
        return None
    reads = _reads(program, idx)
    if not is_attention(subprogram(program, idx, reads, [out])):
        return None
    return idx


def attention_cut(program: Program, is_attention) -> list[Stage] | None:
    """The program as kernels and glue, in an order that computes each value before it is read: each
    attention (`attention_region`) one stage, every other dot_general one `matmul` stage, and what is left
    (slices, RoPE, concatenates, reshapes) `glue` stages the caller writes in plain JAX; None without an
    attention beside another contraction. For a block whose projections' weights no VMEM holds together
    (DeepSeek-V3's MLA: 7168 x 1536, 1536 x 24576, ... at bf16), where one kernel of everything cannot."""
    eqns = program["equations"]
    p = pivot(program)
    if p is None:
        return None
    region = attention_region(program, p, is_attention)
    if region is None:
        return None
    dots = [i for i, e in enumerate(eqns) if e["primitive"] == "dot_general" and i not in region]
    if not dots:
        return None
    made_by = producers(program)
    unit = {i: ("attention", region[0]) for i in region}
    unit.update({i: ("matmul", i) for i in dots})
    unit.update({i: ("glue", i) for i in range(len(eqns)) if i not in unit})
    members: dict[tuple[str, int], list[int]] = {}
    for i in range(len(eqns)):
        members.setdefault(unit[i], []).append(i)
    needs = {
        u: {unit[made_by[a]] for i in idx for a in eqns[i]["inputs"] if a in made_by} - {u}
        for u, idx in members.items()
    }
    order: list[tuple[str, int]] = []
    done: set[tuple[str, int]] = set()
    while len(order) < len(members):  # Kahn's order, the unit whose first equation comes first
        ready = [u for u in members if u not in done and needs[u] <= done]
        u = min(ready, key=lambda v: members[v][0])
        order.append(u)
        done.add(u)
    merged: list[tuple[str, list[int]]] = []
    for u in order:  # neighbouring glue equations are one glue stage
        if u[0] == "glue" and merged and merged[-1][0] == "glue":
            merged[-1][1].extend(members[u])
        else:
            merged.append((u[0], list(members[u])))
    read_later: list[set[str]] = []
    later: set[str] = set(program["outputs"])
    for _, idx in reversed(merged):
        read_later.append(set(later))
        later |= set(_reads(program, idx))
    read_later.reverse()
    stages = []
    for (role, idx), needed in zip(merged, read_later, strict=True):
        idx = sorted(idx)
        outs = [o for i in idx for o in eqns[i]["outputs"] if o in needed]
        if not outs:
            continue
        sub = {
            **subprogram(program, idx, _reads(program, idx), outs),
            "cut_stage": True,
        }  # batched_matmul.k_strict
        stages.append(Stage(role=role, program=sub, outputs=tuple(outs)))
    return stages


HEAVY = {"conv_general_dilated", "dot_general"}


def prep_cut(program: Program) -> list[Stage] | None:
    """The program as glue, then the rest: the glue is every equation a contraction's computed operand
    comes from, when those read inputs alone and contract nothing (a transposed conv's input scattered into
    zeros at its stride and padded, its kernel flipped: 28k); None when no contraction reads such a value.
    The rest, whose contraction then reads its operands as inputs, is the template's program."""
    eqns = program["equations"]
    made_by = producers(program)
    heavy = [i for i, e in enumerate(eqns) if e["primitive"] in HEAVY]
    if not heavy or not any(a in made_by for a in eqns[heavy[0]]["inputs"]):
        return None
    prep = upstream(program, eqns[heavy[0]]["inputs"], made_by)
    if any(eqns[i]["primitive"] in HEAVY for i in prep):
        return None  # a contraction feeds it: not preparation of the inputs
    glue = sorted(prep)
    if any(o in program["outputs"] for i in glue for o in eqns[i]["outputs"]):
        return None  # the program returns a prepared value: the glue would be the whole answer
    rest = [i for i in range(len(eqns)) if i not in prep]
    reads = _reads(program, rest)
    outs = [o for i in glue for o in eqns[i]["outputs"] if o in reads]
    return [
        Stage(
            role="glue", program=subprogram(program, glue, _reads(program, glue), outs), outputs=tuple(outs)
        ),
        Stage(
            role="rest",
            program=subprogram(program, rest, reads, list(program["outputs"])),
            outputs=tuple(program["outputs"]),
        ),
    ]


# ---------------------------------------------------------------------------------------------------
# Equations no kernel writes as traced (sort, scatter-add, a top_k too wide for rounds): held apart


def held_cut(program: Program, held: Callable[[Mapping[str, Any]], bool]) -> list[Stage] | None:
    """The program in the order its values are made: `kernel` stages of the equations a Pallas body can
    write, and `held` stages of those `held(eqn)` says it cannot (the caller writes a held stage as a kernel
    where a template of its own serves it, else as plain-JAX glue XLA runs); None when nothing is held.

    A held equation's depth is how many held equations lie on its longest path from the inputs; a kernel
    equation's is the least of its readers' (the last depth when none reads it), never less than that count:
    the kernel equations at one depth are one stage, run before the held equations of that depth, which run
    before the next depth's kernel stage. Each stage reads only values made before it, the kernel stages are
    as few and as large as the held equations allow, and a value goes to HBM only where a held one needs it."""
    eqns = program["equations"]
    hold = [bool(held(e)) for e in eqns]
    if not any(hold):
        return None
    made_by = producers(program)
    if any(o not in made_by for o in program["outputs"]):
        return None  # an input returned as it is
    # equations that read no input (a zeros fill, an iota): made again in each stage that reads them, never
    # a stage's output written to HBM
    free: set[int] = set()
    for i, e in enumerate(eqns):
        if not hold[i] and all(a.startswith("lit:") or made_by.get(a) in free for a in e["inputs"]):
            free.add(i)
    depth: list[int] = []
    for e in eqns:
        ds = [depth[made_by[a]] + hold[made_by[a]] for a in e["inputs"] if a in made_by]
        depth.append(max(ds, default=0))
    # a kernel equation no held one waits on runs as late as its readers allow: in the stage that reads it
    # (a scale's cast beside the norm that uses it, not an HBM value from the first stage)
    readers: dict[int, list[int]] = {}
    for j, e in enumerate(eqns):
        for a in e["inputs"]:
            if a in made_by:
                readers.setdefault(made_by[a], []).append(j)
    last = max(depth)
    for i in reversed(range(len(eqns))):
        if not hold[i] and i not in free:
            depth[i] = min((depth[j] for j in readers.get(i, ()) if j not in free), default=last)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, d in enumerate(depth):
        if i not in free:
            groups.setdefault((d, hold[i]), []).append(i)
    groups = {
        g: sorted(set(idx) | (upstream(program, _reads(program, idx), made_by) & free))
        for g, idx in groups.items()
    }
    order = sorted(groups)  # (0, kernel), (0, held), (1, kernel), ...
    later: set[str] = set(program["outputs"])
    needed: dict[tuple[int, int], set[str]] = {}
    for g in reversed(order):
        needed[g] = set(later)
        later |= set(_reads(program, groups[g]))
    stages = []
    for g in order:
        idx = groups[g]
        outs = [o for i in idx for o in eqns[i]["outputs"] if o in needed[g]]
        if not outs:
            continue
        role = "held" if g[1] else "kernel"
        stages.append(
            Stage(
                role=role, program=subprogram(program, idx, _reads(program, idx), outs), outputs=tuple(outs)
            )
        )
    return stages
