"""Is a traced program a dense top-k mixture of experts, and where are its parts?

A reference may write a routed MoE layer densely (JaxBench 10p): every expert runs on every token
(`einsum("bse,nem->bsnm", x, w_gate)` ...) and the results are combined with weights that are a one-hot of
`lax.top_k`'s indices times per-choice values, summed over the choices. A token's weight for an expert it
did not choose is then a sum of exact zeros (0 * v for a finite v), so its term adds exactly nothing, and
the output equals the sum over the chosen experts only: the sparse form an expert writes (route, sort the
(token, choice) pairs by expert, grouped matmuls, the weighted combine), with top_k/N of the matmul work.

`recognise` proves that from the equations and says where each part is, or raises `NotDenseMoE` naming
the first thing that does not fit. What it requires:
- the combine weights W [*T, N] are `reduce_sum` over the choice axis of one-hot(top_k indices) * values,
  the one-hot an `eq` of the indices against an iota over N (N the number of experts, top_k's axis size);
- every value between the tokens x [*T, E] and the combine is per expert: the expert matmuls contract x's
  last axis with a weight [N, E, M] / [N, M, E] (no batch axis), the elementwise ops between them take
  only such values and literals, and the down matmul contracts M with its weight's M and batches the
  expert axis with its weight's expert axis; so y[t, n] depends on x[t] and expert n's weights alone;
- the output is `reduce_sum` over the expert axis of y (converted or transposed, nothing else) times W
  broadcast along y's last axis, laid out [*T, E_out].
Values equal to the reference's at every chosen (token, expert); the rounding of each step (each matmul's
result in its dtype, the epilogue's ops) is the reference's own. Ties in top_k are the reference's too:
the routing equations are its own. For top_k <= 2 the weighted sum is exact (a + b + zeros); with more
choices only the order of the f32 additions can differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from maxkernel.tpu_tools.problem import safe_ast
from maxkernel.tpu_tools.problem.emit import ELEMENTWISE, Program

_THROUGH = ("broadcast_in_dim", "convert_element_type", "reshape")  # ops the one-hot's operands pass through


class NotDenseMoE(ValueError):
    """The program is not a dense top-k mixture this rewrite can prove sparse; the message says why."""


@dataclass(frozen=True)
class ExpertDot:
    eq: int  # the dot_general's equation
    weight: str  # the expert weight: [N, K, F] (rhs_nk False) or [N, F, K]
    rhs_nk: bool
    dtype: str  # the dot's result dtype (the reference rounds its f32 accumulation to this)


@dataclass(frozen=True)
class DenseMoE:
    x: str  # the tokens [*T, E]
    indices: str  # top_k's indices [*T, K]
    weights: str  # the combine weights [*T, N]
    num_experts: int
    first: tuple[ExpertDot, ...]  # the matmuls on x (gate, up), in program order
    epilogue: tuple[int, ...]  # the elementwise equations from their results to the down matmul's operand
    hidden: str  # the down matmul's activation operand (the epilogue's result, or a first matmul's)
    down: ExpertDot
    combine_dtype: str  # the dtype the weighted terms are multiplied and summed in
    router: tuple[int, ...]  # every other equation (routing, and whatever makes x): plain JAX before


def _dims(e: Mapping[str, Any]) -> tuple[tuple[int, ...], ...]:
    (lc, rc), (lb, rb) = safe_ast.literal_eval(e["params"]["dimension_numbers"])
    return tuple(lc), tuple(rc), tuple(lb), tuple(rb)


def recognise(program: Program) -> DenseMoE:
    """The parts of a dense top-k mixture (see the module docstring); NotDenseMoE says why not."""
    eqns = program["equations"]
    names = set(program["input_names"])
    producer = {o: i for i, e in enumerate(eqns) for o in e["outputs"]}
    users: dict[str, list[int]] = {}
    for i, e in enumerate(eqns):
        for a in e["inputs"]:
            users.setdefault(a, []).append(i)

    def spec(v: str) -> dict[str, Any]:
        if v in names:
            return program["inputs"][program["input_names"].index(v)]
        e = eqns[producer[v]]
        return e["out_specs"][e["outputs"].index(v)]

    def made_by(v: str, prim: str) -> Mapping[str, Any] | None:
        e = eqns[producer[v]] if v in producer else None
        return e if e is not None and e["primitive"] == prim else None

    def through(v: str) -> str:
        """`v` followed back through broadcasts, converts and reshapes."""
        while v in producer and eqns[producer[v]]["primitive"] in _THROUGH:
            v = eqns[producer[v]]["inputs"][0]
        return v

    def in_place(v: str) -> bool:
        """`v` is top_k's indices with axes only added after theirs (token t's choices stay token t's)."""
        while v in producer and eqns[producer[v]]["primitive"] in (
            "broadcast_in_dim",
            "convert_element_type",
        ):
            e = eqns[producer[v]]
            if e["primitive"] == "broadcast_in_dim":
                rank = len(spec(e["inputs"][0])["shape"])
                if tuple(safe_ast.literal_eval(e["params"]["broadcast_dimensions"])) != tuple(range(rank)):
                    return False
            v = e["inputs"][0]
        return v == indices

    tops = [i for i, e in enumerate(eqns) if e["primitive"] == "top_k"]
    if len(tops) != 1:
        raise NotDenseMoE(f"{len(tops)} top_k equations (a routed mixture has one)")
    top = eqns[tops[0]]
    logits_shape = spec(top["inputs"][0])["shape"]
    if int(top["params"].get("axis", len(logits_shape) - 1)) != len(logits_shape) - 1:
        raise NotDenseMoE("top_k is not over the last axis")
    n_exp = logits_shape[-1]
    tokens = list(logits_shape[:-1])
    nt = len(tokens)
    indices = top["outputs"][1]
    if len(program["outputs"]) != 1:
        raise NotDenseMoE("the program has more than one output")

    # --- the combine: out = reduce_sum_n(y' * broadcast(W)) ----------------------------------------
    out = program["outputs"][0]
    red = made_by(out, "reduce_sum")
    if red is None:
        raise NotDenseMoE("the output is not a reduce_sum (the combine over experts)")
    axes = tuple(safe_ast.literal_eval(red["params"]["axes"]))
    prod = made_by(red["inputs"][0], "mul")
    if prod is None or len(axes) != 1:
        raise NotDenseMoE("the output is not a sum over one axis of a product (weights * expert outputs)")
    n_pos = axes[0]

    def weights_of(v: str) -> tuple[str, tuple[int, ...]] | None:
        b = made_by(v, "broadcast_in_dim")
        if b is None:
            return None
        w = b["inputs"][0]
        wr = made_by(w, "reduce_sum")
        q = made_by(wr["inputs"][0], "mul") if wr is not None else None
        if q is None:
            return None
        return w, tuple(safe_ast.literal_eval(b["params"]["broadcast_dimensions"]))

    found = [(weights_of(a), b) for a, b in (prod["inputs"], prod["inputs"][::-1])]
    found = [(w, other) for w, other in found if w is not None]
    if not found:
        raise NotDenseMoE("neither operand of the combine's product is broadcast weights summed over choices")
    (weights, bdims), y_side = found[0]
    if spec(weights)["shape"] != [*tokens, n_exp]:
        raise NotDenseMoE(f"the combine weights are {spec(weights)['shape']}, not [*tokens, experts]")

    # --- the weights: reduce_sum over choices of one-hot(top_k indices) * values -------------------
    wr = made_by(weights, "reduce_sum")
    if tuple(safe_ast.literal_eval(wr["params"]["axes"])) != (nt,):
        raise NotDenseMoE("the weights are not summed over the choice axis")
    q = made_by(wr["inputs"][0], "mul")
    onehot_ok = False
    for a in q["inputs"]:
        c = made_by(a, "convert_element_type")
        eq = made_by(c["inputs"][0], "eq") if c is not None else None
        if eq is None:
            continue
        ends = [through(v) for v in eq["inputs"]]
        iotas = [made_by(v, "iota") for v in ends]
        hit = [k for k, io in enumerate(iotas) if io is not None]
        if len(hit) != 1 or ends[1 - hit[0]] != indices or not in_place(eq["inputs"][1 - hit[0]]):
            continue
        io = iotas[hit[0]]
        shape = list(safe_ast.literal_eval(io["params"]["shape"]))
        rank = nt + 2
        if int(io["params"]["dimension"]) == rank - 1 and len(shape) == rank and shape[-1] == n_exp:
            onehot_ok = spec(a)["shape"][-1] == n_exp
    if not onehot_ok:
        raise NotDenseMoE(
            "the weights are not a one-hot of top_k's indices (an iota over experts) times values"
        )

    # --- forward from x: which values are per-expert, and their axes' roles ------------------------
    dots = [i for i, e in enumerate(eqns) if e["primitive"] == "dot_general"]
    roles: dict[str, tuple[str, ...]] = {}
    first: list[ExpertDot] = []
    x = None
    token_roles = tuple(f"t{i}" for i in range(nt))
    for i in dots:
        e = eqns[i]
        lc, rc, lb, rb = _dims(e)
        for side in (0, 1):
            xv, wv = e["inputs"][side], e["inputs"][1 - side]
            xs, ws = spec(xv)["shape"], spec(wv)["shape"]
            xc, wc = (lc, rc) if side == 0 else (rc, lc)
            if lb or xs[:-1] != tokens or xc != (len(xs) - 1,) or len(ws) != 3 or wv in roles:
                continue
            if ws[0] != n_exp or wc[0] == 0 or n_exp in [ws[d] for d in (1, 2) if d != wc[0]]:
                continue  # the expert axis must lead, be free, and not be confused with the feature axis
            if x is not None and xv != x:
                raise NotDenseMoE("the expert matmuls read different token arrays")
            x = xv
            free = [d for d in range(3) if d != wc[0]]  # [0 (experts), feature]
            wroles = {free[0]: "n", free[1]: "m"}
            xroles = token_roles
            out_roles = (
                (*xroles, *(wroles[d] for d in free)) if side == 0 else (*(wroles[d] for d in free), *xroles)
            )
            roles[e["outputs"][0]] = out_roles
            first.append(ExpertDot(i, wv, wc[0] == 2, e["out_specs"][0]["dtype"]))
            break
    if not first:
        raise NotDenseMoE("no matmul of the tokens with a stacked expert weight [experts, E, F]")
    if (
        len({d.rhs_nk for d in first}) != 1
        or len({spec(d.weight)["shape"][1 + (not d.rhs_nk)] for d in first}) != 1
    ):
        raise NotDenseMoE("the first expert matmuls' weights differ in layout or width")

    epilogue: list[int] = []
    down: ExpertDot | None = None
    chain = {d.eq for d in first}
    y_roles: tuple[str, ...] | None = None
    y_ops: list[int] = []  # converts and transposes from the down matmul to the combine
    first_eq = min(chain)
    for i in range(first_eq, len(eqns)):
        e = eqns[i]
        if i in chain or e is prod or e is red:
            continue
        live = [a for a in e["inputs"] if a in roles]
        if not live:
            continue
        prim = e["primitive"]
        if prim == "dot_general":
            if down is not None or y_roles is not None:
                raise NotDenseMoE("more than one matmul after the expert matmuls")
            lc, rc, lb, rb = _dims(e)
            side = 0 if e["inputs"][0] in roles else 1
            hv, wv = e["inputs"][side], e["inputs"][1 - side]
            hr, ws = roles[hv], spec(wv)["shape"]
            (hc, wc), (hb, wb) = ((lc, rc), (lb, rb)) if side == 0 else ((rc, lc), (rb, lb))
            if wv in roles or len(ws) != 3 or len(hc) != 1 or len(hb) != 1:
                raise NotDenseMoE("the down matmul is not one contraction with one batch axis")
            if hr[hc[0]] != "m" or hr[hb[0]] != "n" or wb[0] != 0 or wc[0] == 0:
                raise NotDenseMoE("the down matmul does not contract the expert width and batch the experts")
            if set(live) != {hv}:
                raise NotDenseMoE("the down matmul mixes two per-expert values")
            h_free = [r for k, r in enumerate(hr) if k not in (hc[0], hb[0])]
            # dot_general's result: batch axes, then the lhs's free axes, then the rhs's
            out_roles = ("n", *h_free, "e") if side == 0 else ("n", "e", *h_free)
            roles[e["outputs"][0]] = out_roles
            down = ExpertDot(i, wv, wc[0] == 2, e["out_specs"][0]["dtype"])
            hidden = hv
            y_roles = out_roles
            chain.add(i)
            continue
        if prim in ("transpose", "convert_element_type") and down is not None:
            perm = safe_ast.literal_eval(e["params"]["permutation"]) if prim == "transpose" else None
            r = roles[e["inputs"][0]]
            roles[e["outputs"][0]] = tuple(r[p] for p in perm) if perm else r
            y_ops.append(i)
            chain.add(i)
            continue
        if down is not None:
            raise NotDenseMoE(
                f"a {prim} between the down matmul and the combine (only converts and transposes)"
            )
        if prim not in ELEMENTWISE:
            raise NotDenseMoE(
                f"a {prim} between the expert matmuls (only elementwise ops keep them per expert)"
            )
        others = [a for a in e["inputs"] if a not in roles and not a.startswith("lit:")]
        if others or len({roles[a] for a in live}) != 1:
            raise NotDenseMoE(f"a {prim} between the expert matmuls mixes in a value that is not per expert")
        roles[e["outputs"][0]] = roles[live[0]]
        epilogue.append(i)
        chain.add(i)
    if down is None:
        raise NotDenseMoE("no down matmul batched over the experts")
    if y_side not in roles or y_side not in {eqns[i]["outputs"][0] for i in (*y_ops, down.eq)}:
        raise NotDenseMoE("the combine's other operand is not the down matmul's result")
    yr = roles[y_side]
    want = {f"t{i}": bdims[i] for i in range(nt)} | {"n": bdims[nt]}
    if len(yr) != nt + 2 or any(yr[pos] != r for r, pos in want.items()) or yr[n_pos] != "n":
        raise NotDenseMoE("the combine does not pair each token's weights with its experts' outputs")
    if tuple(r for r in yr if r != "n") != (*token_roles, "e"):
        raise NotDenseMoE("the output is not laid out [*tokens, features]")
    # every per-expert value feeds only the chain and the combine
    for v in roles:
        for u in users.get(v, []):
            if u not in chain and eqns[u] is not prod:
                raise NotDenseMoE(f"a per-expert value feeds {eqns[u]['primitive']} outside the experts")
    if out in roles or any(o in roles for o in program["outputs"][:-1]):
        raise NotDenseMoE("a per-expert value is an output")
    bcast = producer[prod["inputs"][1] if prod["inputs"][0] == y_side else prod["inputs"][0]]
    combine = {i for i, e in enumerate(eqns) if e is prod or e is red} | {bcast}
    router = tuple(i for i in range(len(eqns)) if i not in chain and i not in combine)
    return DenseMoE(
        x=x,
        indices=indices,
        weights=weights,
        num_experts=n_exp,
        first=tuple(first),
        epilogue=tuple(epilogue),
        hidden=hidden,
        down=down,
        combine_dtype=prod["out_specs"][0]["dtype"],
        router=router,
    )
