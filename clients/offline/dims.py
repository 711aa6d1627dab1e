"""Every number in a traced program that follows the reference's size, written from the input shapes.

`describe_reference` traces the program at one size and records what differs at the reference's other
sizes (`variants`). Here each number is explained across those sizes: one that never changes is a
constant; one that changes is written as an input dimension (`sh[i][j]`, the shape of input i at trace
time), a dimension times or over a constant, a product or quotient of two, or a dimension plus a small
offset (a convolution's valid output); a float literal that changes is written as d, 1/d, sqrt(d) or
1/sqrt(d) of such an expression. A kernel that computes `sh` from its arguments at trace time then runs
unchanged at every size. A number nothing explains lands in `unsolved`, with where it is: a kernel
written from it would be right at one size only, so the model says so instead of writing it.
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

Program = Mapping[str, Any]
INT = re.compile(r"(?<![\w.])-?\d+(?![\w.])")  # an integer token, not part of a name or a float
LITERAL = re.compile(r"^lit:jnp\.asarray\((.+), jnp\.(\w+)\)$")
TARGET_DEFAULT = "full"
_MAX_STRIDE = 4  # a transposed convolution's stride (dilated extents: s * d - s + 1)
_MAX_OFFSET = 8


def target_size(program: Program, mismatched: bool = False) -> str:
    """The size the kernel is for: the description's `target_size` if it names one, else `full` when the
    reference has it, else the largest by input element count. `mismatched`: sizes whose traced structure
    differs count too (a template that writes no equations of the trace: ragged_paged)."""
    named = program.get("target_size")
    sizes = {str(program.get("size")): program["inputs"], **_variant_inputs(program, mismatched)}
    if named in sizes:
        return str(named)
    if TARGET_DEFAULT in sizes:
        return TARGET_DEFAULT
    return max(sizes, key=lambda s: sum(math.prod(t["shape"]) for t in sizes[s]))


def _variant_inputs(program: Program, mismatched: bool = False) -> dict[str, list]:
    variants = (program.get("variants") or {}).items()
    return {k: v["inputs"] for k, v in variants if mismatched or not v.get("mismatch")}


class Symbolic:
    """The program's numbers across its traced sizes, and the expression each one is written as."""

    def __init__(self, program: Program) -> None:
        self.program = program
        variants = program.get("variants") or {}
        self.mismatch = {k: v["mismatch"] for k, v in variants.items() if v.get("mismatch")}
        self.variants = {k: v for k, v in variants.items() if not v.get("mismatch")}
        self.sizes = [str(program.get("size")), *self.variants]
        self.target = target_size(program)
        self.index = {e["outputs"][0]: i for i, e in enumerate(program["equations"]) if e["outputs"]}
        self.unsolved: list[str] = []
        self.dims: list[tuple[str, tuple[int, ...]]] = []
        for i, spec in enumerate(program["inputs"]):
            per_size = [spec["shape"], *(v["inputs"][i]["shape"] for v in self.variants.values())]
            for j in range(len(spec["shape"])):
                self.dims.append((f"sh[{i}][{j}]", tuple(int(s[j]) for s in per_size)))

    # ---- what each size says --------------------------------------------------------------------
    def _variant_eqn(self, size: str, idx: int, part: str) -> Any:
        table = self.variants[size].get(part) or {}
        return table.get(str(idx), table.get(idx))

    def param_texts(self, e: Mapping[str, Any], key: str) -> list[str]:
        idx = self.index[e["outputs"][0]]
        base = e["params"][key]
        out = [base]
        for size in self.variants:
            got = self._variant_eqn(size, idx, "params") or {}
            out.append(got.get(key, base))
        return out

    def literal_texts(self, e: Mapping[str, Any], pos: int) -> list[str]:
        idx = self.index[e["outputs"][0]]
        base = e["inputs"][pos]
        out = [base]
        for size in self.variants:
            got = self._variant_eqn(size, idx, "literals") or {}
            out.append(got.get(str(pos), got.get(pos, base)))
        return out

    def out_shapes(self, e: Mapping[str, Any], k: int = 0) -> list[list[int]]:
        idx = self.index[e["outputs"][0]]
        out = [e["out_specs"][k]["shape"]]
        for size in self.variants:
            got = self._variant_eqn(size, idx, "shapes")
            out.append(got[k] if got else e["out_specs"][k]["shape"])
        return out

    def at(self, size: str) -> dict[str, Any]:
        """Input and output specs at `size` (the base trace or one of its variants)."""
        if size == self.sizes[0] or size not in self.variants:
            return {"inputs": self.program["inputs"], "out_specs": self.program["out_specs"]}
        v = self.variants[size]
        return {"inputs": v["inputs"], "out_specs": v["out_specs"]}

    def eqn_shapes_at(self, size: str) -> list[list[list[int]]]:
        """Every equation's output shapes at `size`."""
        if size == self.sizes[0] or size not in self.variants:
            return [[s["shape"] for s in e["out_specs"]] for e in self.program["equations"]]
        out = []
        for i, e in enumerate(self.program["equations"]):
            got = self._variant_eqn(size, i, "shapes")
            out.append(got if got else [s["shape"] for s in e["out_specs"]])
        return out

    # ---- solving --------------------------------------------------------------------------------
    def expr(self, values: Sequence[int], where: str) -> str:
        """The source expression of an integer that takes `values` at the traced sizes."""
        values = tuple(int(v) for v in values)
        if len(set(values)) == 1:
            return str(values[0])
        found = self._solve(values)
        if found is None:
            self.unsolved.append(f"{where}: {values[0]} at {self.sizes[0]}, {values[1:]} at {self.sizes[1:]}")
            return str(values[0])
        return found

    def _solve(self, v: tuple[int, ...]) -> str | None:
        dims = self.dims
        for name, d in dims:
            if d == v:
                return name
        for name, d in dims:
            if (
                all(x and y % x == 0 for x, y in zip(d, v, strict=True))
                and len({y // x for x, y in zip(d, v, strict=True)}) == 1
            ):
                return f"{name} * {v[0] // d[0]}"
            if (
                all(y and x % y == 0 for x, y in zip(d, v, strict=True))
                and len({x // y for x, y in zip(d, v, strict=True)}) == 1
            ):
                return f"{name} // {d[0] // v[0]}"
        for (a, da), (b, db) in _distinct_first(dims, 2):
            if tuple(x * y for x, y in zip(da, db, strict=True)) == v:
                return f"{a} * {b}"
        for (a, da), (b, db) in itertools.permutations(dims, 2):
            if all(y and x % y == 0 and x // y == z for x, y, z in zip(da, db, v, strict=True)):
                return f"{a} // {b}"
        for name, d in dims:
            diffs = {y - x for x, y in zip(d, v, strict=True)}
            if len(diffs) == 1 and 0 < abs(c := diffs.pop()) <= _MAX_OFFSET:
                return f"{name} {'+' if c > 0 else '-'} {abs(c)}"
        for (a, da), (b, db), (c, dc) in _distinct_first(dims, 3):
            if tuple(x * y * z for x, y, z in zip(da, db, dc, strict=True)) == v:
                return f"{a} * {b} * {c}"
        return self._solve_products(v) or self._solve_affine(v)

    def _solve_affine(self, v: tuple[int, ...]) -> str | None:
        """A dim times a small stride plus an offset: a transposed convolution's dilated extent, s * (d - 1) + 1,
        and that padded, s * (d - 1) + 1 + 2 * e. Tried last (after every product) and only where the dim takes
        at least two values: two points fit any line."""
        for name, d in self.dims:
            if len(set(d)) < 2:
                continue
            for k in range(2, _MAX_STRIDE + 1):
                diffs = {y - k * x for x, y in zip(d, v, strict=True)}
                if len(diffs) == 1 and 0 < abs(c := diffs.pop()) <= _MAX_OFFSET:
                    return f"{name} * {k} {'+' if c > 0 else '-'} {abs(c)}"
        return None

    def _solve_products(self, v: tuple[int, ...]) -> str | None:
        """A product of two or three dims times or over a constant (a group norm's count: C / G * H * W),
        or of dims less a common offset (a valid convolution's output count: (H - 2) * (W - 2))."""
        atoms: dict[tuple[int, ...], list[str]] = {}
        for name, d in self.dims:  # the search is over distinct values; each keeps every dim that has them
            atoms.setdefault(d, []).append(name)
        plain = [(names, d) for d, names in atoms.items()]
        for r in (2, 3):
            for combo in itertools.combinations_with_replacement(plain, r):
                prod = [math.prod(x) for x in zip(*(d for _, d in combo), strict=True)]
                found = _scaled(_named([(names, d, "{}") for names, d in combo]), prod, v)
                if found:
                    return found
        for c in range(1, _MAX_OFFSET + 1):
            shifted = [(names, tuple(x - c for x in d), f"({{}} - {c})") for names, d in plain if min(d) > c]
            shifted += [(names, tuple(x + c for x in d), f"({{}} + {c})") for names, d in plain]
            for r in (1, 2, 3):
                for combo in itertools.combinations_with_replacement(shifted, r):
                    prod = [math.prod(x) for x in zip(*(d for _, d, _ in combo), strict=True)]
                    found = _scaled(_named(combo), prod, v)
                    if found:
                        return found
        return None

    def float_expr(self, values: Sequence[float], where: str) -> str | None:
        """A float that changes with size, as d, 1/d, sqrt(d) or 1/sqrt(d) of a solvable integer d."""
        forms = (
            (lambda f: f, "float({})"),
            (lambda f: 1.0 / f, "1.0 / {}"),
            (lambda f: f * f, "math.sqrt({})"),
            (lambda f: 1.0 / (f * f), "1.0 / math.sqrt({})"),
        )
        for to_int, form in forms:
            try:
                cands = [to_int(f) for f in values]
            except ZeroDivisionError:
                continue
            ints = [round(c) for c in cands]
            if all(i > 0 and abs(c - i) <= 1e-5 * i for c, i in zip(cands, ints, strict=True)):
                found = self._solve(tuple(ints)) if len(set(ints)) > 1 else None
                if found is not None:
                    return form.format(found)
        self.unsolved.append(f"{where}: the literal {values[0]!r} at {self.sizes[0]}, {list(values[1:])}")
        return None

    # ---- rewriting ------------------------------------------------------------------------------
    def param(self, e: Mapping[str, Any], key: str) -> str:
        """The parameter's source with every number that follows the size written from `sh`."""
        texts = self.param_texts(e, key)
        if len(set(texts)) == 1:
            return texts[0]
        skeletons = {INT.sub("#", t) for t in texts}
        numbers = [INT.findall(t) for t in texts]
        where = f"{e['primitive']} {e['outputs'][0]} {key}"
        if len(skeletons) != 1 or len({len(n) for n in numbers}) != 1:
            self.unsolved.append(f"{where}: its form changes with size ({texts[0]} vs {texts[1]})")
            return texts[0]
        exprs = iter(self.expr([int(n[k]) for n in numbers], where) for k in range(len(numbers[0])))
        return INT.sub(lambda m: next(exprs), texts[0])

    def shape_elems(self, e: Mapping[str, Any], key: str) -> list[str]:
        """A shape-valued parameter (broadcast shape, reshape sizes, iota shape, slice limits), per element."""
        tuples = [list(ast.literal_eval(t)) for t in self.param_texts(e, key)]
        where = f"{e['primitive']} {e['outputs'][0]} {key}"
        return [self.expr([t[k] for t in tuples], f"{where}[{k}]") for k in range(len(tuples[0]))]

    def literal(self, e: Mapping[str, Any], pos: int) -> str:
        """A literal operand, written from `sh` when it changes with size (a mean's divisor, a scale)."""
        texts = self.literal_texts(e, pos)
        if len(set(texts)) == 1:
            return texts[0]
        where = f"{e['primitive']} {e['outputs'][0]} operand {pos}"
        found = [LITERAL.match(t) for t in texts]
        if not all(found):
            self.unsolved.append(f"{where}: {texts[0]}")
            return texts[0]
        dtype = found[0].group(2)
        try:
            nums = [float(ast.literal_eval(m.group(1))) for m in found]
        except (ValueError, SyntaxError):
            self.unsolved.append(f"{where}: {texts[0]}")
            return texts[0]
        if "int" in dtype:
            expr = self.expr([int(x) for x in nums], where)
        else:
            expr = self.float_expr(nums, where) or found[0].group(1)
        return f"lit:jnp.asarray({expr}, jnp.{dtype})"

    def shape(self, shapes: Sequence[Sequence[int]], where: str) -> list[str]:
        """Per element, a shape that takes `shapes` at the traced sizes."""
        return [self.expr([s[k] for s in shapes], f"{where}[{k}]") for k in range(len(shapes[0]))]

    def output_shape(self, k: int) -> list[str]:
        shapes = [
            self.program["out_specs"][k]["shape"],
            *(v["out_specs"][k]["shape"] for v in self.variants.values()),
        ]
        return self.shape(shapes, f"output {k}")


def _distinct_first(dims: Sequence[tuple[str, tuple[int, ...]]], r: int):
    """Products of r dims, those of r distinct dims first: where two dims take the same values at every traced
    size (a square H x W), H * W, not H * H, is what stays right at a size no trace saw."""
    yield from itertools.combinations(dims, r)
    yield from (c for c in itertools.combinations_with_replacement(dims, r) if len(set(c)) < r)


def _named(combo: Sequence[tuple[Sequence[str], tuple[int, ...], str]]) -> str:
    """The product's source: a value tuple met k times takes k of the dims that have it, in order (H, then W),
    each written through its form (`({} - 2)`)."""
    used: dict[tuple[int, ...], int] = {}
    out = []
    for names, _values, form in combo:
        k = used.get(tuple(names), 0)
        used[tuple(names)] = k + 1
        out.append(form.format(names[k % len(names)]))
    return " * ".join(out)


def _scaled(expr: str, prod: Sequence[int], v: Sequence[int]) -> str | None:
    """`expr`, `expr * k` or `expr // k` when `prod` (its values) is `v` up to one integer factor k."""
    if any(p <= 0 for p in prod):
        return None
    if tuple(prod) == tuple(v):
        return expr
    if (
        all(y % x == 0 for x, y in zip(prod, v, strict=True))
        and len({y // x for x, y in zip(prod, v, strict=True)}) == 1
    ):
        return f"{expr} * {v[0] // prod[0]}"
    if (
        all(x % y == 0 for x, y in zip(prod, v, strict=True))
        and len({x // y for x, y in zip(prod, v, strict=True)}) == 1
    ):
        return f"{expr} // {prod[0] // v[0]}"
    return None


def shape_source(elems: Sequence[str]) -> str:
    """`(a, b)` / `(a,)` from element expressions."""
    return "(" + ", ".join(elems) + ("," if len(elems) == 1 else "") + ")"


def program_at(program: Program, size: str) -> dict[str, Any]:
    """The program as traced at `size` (the base trace with that variant's shapes, params and literals).

    Which axes tile is decided on the target's trace: at a small size a batch of 1 or a dim that happens
    to equal another makes coincidences a larger size does not have.
    """
    variant = (program.get("variants") or {}).get(size)
    if size == program.get("size") or not variant or variant.get("mismatch"):
        return dict(program)

    def get(part: str, i: int) -> Any:
        table = variant.get(part) or {}
        return table.get(str(i), table.get(i))

    eqns = []
    for i, e in enumerate(program["equations"]):
        params = {**e["params"], **(get("params", i) or {})}
        lits = get("literals", i) or {}
        inputs = [lits.get(str(j), lits.get(j, a)) for j, a in enumerate(e["inputs"])]
        shapes = get("shapes", i)
        specs = (
            [{**s, "shape": shapes[k]} for k, s in enumerate(e["out_specs"])] if shapes else e["out_specs"]
        )
        eqns.append({**e, "params": params, "inputs": inputs, "out_specs": specs})
    return {
        **program,
        "size": size,
        "inputs": variant["inputs"],
        "out_specs": variant["out_specs"],
        "equations": eqns,
    }
