"""What a reference *is*: its traced program (jaxpr) as plain data, for models that size kernels from it.

`describe_reference` imports the reference (user code: it runs in a pool child), traces
`workload` on the input specs of one size with `jax.make_jaxpr`, inlines nested calls (jit,
custom_jvp/vjp, remat) and returns every equation with its operands, output shapes and dtypes and its
parameters written as Python source text. The offline model classifies the program from this data and
re-emits its equations inside a Pallas kernel body, so a kernel's numerics follow the reference's own
structure. The `census` counts primitives; `unrenderable` lists the primitives whose parameters have no
source form (a model must not re-emit those).
"""

from __future__ import annotations

import collections
import enum
import math
import re
from typing import Any

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.errors import UsageError
from maxkernel.tpu_tools.hardware.mesh import MeshSpec

_INLINE = ("jit", "pjit", "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "closed_call",
           "core_call", "remat", "remat2", "checkpoint", "custom_lin")  # fmt: skip
_TRANSFORM = re.compile(r"^\w+\(.*\)$")
_DROP_PARAMS = ("sharding", "out_sharding")  # placement hints, None on one device
# Control flow kept as one equation with its bodies as subprograms (their jaxpr params are not source text)
_CONTROL = {"cond": ("branches",), "scan": ("jaxpr",), "while": ("cond_jaxpr", "body_jaxpr")}
_REDUCERS = {"add": "add", "max": "max", "min": "min", "mul": "mul", "and": "bitwise_and", "or": "bitwise_or"}


class TensorSpec(BaseModel):
    shape: list[int]
    dtype: str


class Equation(BaseModel):
    """One primitive application; operands are variable names or Python literals (`lit:` prefix)."""

    primitive: str
    inputs: list[str]
    outputs: list[str]
    out_specs: list[TensorSpec]
    params: dict[str, str] = Field(default_factory=dict, description="parameter -> Python source text")
    scope: str = Field(
        default="",
        description="the user's boundaries around it: named scopes and user functions (jit, custom_vjp)",
    )
    source: str = Field(default="", description="file:line (function) of the user code that made it")
    subprograms: list[SubProgram] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,
        description="a cond's branches, a scan's or while's body (and the while's condition): each its own "
        "equations, written as a local function of a plain-JAX program (absent for every other primitive)",
    )


class SubProgram(BaseModel):
    """One body of a control-flow equation: `inputs` are its parameters (fresh names); the loop-invariant
    operands a scan or while body closes over keep the outer program's names."""

    role: str = Field(description="branch0, branch1, ... (cond) | body (scan, while) | cond (while)")
    inputs: list[str]
    equations: list[Equation]
    outputs: list[str] = Field(description="variable names (or `lit:` literals), in order")


Equation.model_rebuild()


class SizeVariant(BaseModel):
    """The same program traced at another of the reference's sizes: only what differs from the main trace.

    A model writing a shape-generic kernel reads which numbers follow the sizes (a broadcast's shape, a
    mean's divisor) and which stay fixed; keys are equation indices in the main trace.
    """

    inputs: list[TensorSpec]
    out_specs: list[TensorSpec]
    params: dict[int, dict[str, str]] = Field(
        default_factory=dict, description="equation index -> parameter -> source text, where it differs"
    )
    literals: dict[int, dict[int, str]] = Field(
        default_factory=dict, description="equation index -> operand position -> literal, where it differs"
    )
    shapes: dict[int, list[list[int]]] = Field(
        default_factory=dict, description="equation index -> output shapes, where they differ"
    )
    mismatch: str | None = Field(
        default=None, description="why the equations do not line up: the program's structure depends on size"
    )


class ProgramDescription(BaseModel):
    """The reference's workload traced at one size: inputs, equations, outputs, primitive census."""

    kind: str = "program"
    reference: str
    size: str
    inputs: list[TensorSpec]
    input_names: list[str]
    outputs: list[str] = Field(description="variable names (or `lit:` literals) of the outputs, in order")
    out_specs: list[TensorSpec]
    equations: list[Equation]
    census: dict[str, int]
    unrenderable: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    mesh: MeshSpec | None = Field(
        default=None,
        description="multi-chip: the kernel gets these global arrays sharded by in_specs over this mesh "
        "and runs under jax.set_mesh (shard_map + remote DMAs inside); the program above is the global one",
    )
    variants: dict[str, SizeVariant] = Field(
        default_factory=dict,
        description="the reference's other sizes (SIZES order, then the derived check size): what differs "
        "when it is traced there",
    )


class _Unrenderable(Exception):
    pass


def param_source(value: Any) -> str:
    """Python source text that evaluates (with `jax`, `jnp`, `lax`, `np` imported) to `value`."""
    import jax
    import numpy as np

    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, enum.Enum):
        cls = type(value)
        if getattr(jax.lax, cls.__name__, None) is cls:
            return f"lax.{cls.__name__}.{value.name}"
        raise _Unrenderable(f"enum {cls.__name__}")
    if isinstance(value, (int, np.integer)):
        return repr(int(value))
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if math.isnan(f):
            return "float('nan')"
        if math.isinf(f):
            return "float('inf')" if f > 0 else "float('-inf')"
        return repr(f)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return f"jnp.{np.dtype(value).name}"
    if isinstance(value, type) and hasattr(value, "dtype"):  # jnp.float32 and friends
        return f"jnp.{np.dtype(value.dtype).name}"
    if hasattr(value, "_fields") and isinstance(value, tuple):  # a NamedTuple (dimension numbers)
        cls = type(value)
        if getattr(jax.lax, cls.__name__, None) is not cls:
            raise _Unrenderable(f"named tuple {cls.__name__}")
        inner = ", ".join(f"{f}={param_source(getattr(value, f))}" for f in value._fields)
        return f"lax.{cls.__name__}({inner})"
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        if getattr(jax.lax, cls.__name__, None) is not cls:
            raise _Unrenderable(f"dataclass {cls.__name__}")
        inner = ", ".join(
            f"{f.name}={param_source(getattr(value, f.name))}" for f in dataclasses.fields(value)
        )
        return f"lax.{cls.__name__}({inner})"
    if hasattr(value, "eqns") and hasattr(value, "invars"):  # a reducer jaxpr: one binary primitive
        if len(value.eqns) == 1 and len(value.invars) == 2 and value.eqns[0].primitive.name in _REDUCERS:
            return f"lax.{_REDUCERS[value.eqns[0].primitive.name]}"
        raise _Unrenderable("a jaxpr that is not one binary reducer")
    if isinstance(value, (tuple, list)):
        items = [param_source(v) for v in value]
        if isinstance(value, list):
            return "[" + ", ".join(items) + "]"
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    raise _Unrenderable(type(value).__name__)


def _literal_source(val: Any, dtype: Any) -> str:
    import numpy as np

    arr = np.asarray(val)
    if arr.ndim:
        raise _Unrenderable("array literal")
    name = np.dtype(dtype).name
    if name == "bool":
        return repr(bool(arr))
    py = int(arr) if np.issubdtype(arr.dtype, np.integer) else float(arr)
    return f"jnp.asarray({param_source(py)}, jnp.{name})"


def _spec(aval: Any) -> TensorSpec:
    return TensorSpec(shape=[int(d) for d in aval.shape], dtype=str(aval.dtype))


class _Flattener:
    """Walks a jaxpr, inlining nested calls, naming every variable uniquely (v0, v1, ...).

    Each equation records its scope: the named scopes around it plus the user functions it was inlined
    from (a nested `jax.jit` or custom_jvp/vjp defined outside jax; jax's own jitted helpers are
    transparent). With `keep`, `raw` holds each equation's jax object, its operands (("var", name) or
    ("const", value)) and its call path (one number per user call it sits in), so the flat program can
    be evaluated again (tpu_tools/model/flat.py).
    """

    def __init__(self, keep: bool = False, unroll_scans: bool = False) -> None:
        self.unroll_scans = unroll_scans
        self.eqns: list[Equation] = []
        self.census: collections.Counter[str] = collections.Counter()
        self.unrenderable: set[str] = set()
        self.counter = 0
        self.keep = keep
        self.raw: list[tuple[Any, list[tuple[str, Any]], tuple[int, ...]]] = []
        self.const_values: dict[str, Any] = {}
        self.calls = 0

    def fresh(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    def operand(self, atom: Any, env: dict) -> str:
        from jax.extend.core import Literal

        if isinstance(atom, Literal):
            try:
                return "lit:" + _literal_source(atom.val, atom.aval.dtype)
            except _Unrenderable:
                self.unrenderable.add("array literal")
                return "lit:None"
        return env[atom]

    def raw_operand(self, atom: Any, env: dict, consts: dict) -> tuple[str, Any]:
        from jax.extend.core import Literal

        if isinstance(atom, Literal):
            return ("const", atom.val)
        if atom in consts:
            return ("const", consts[atom])
        return ("var", env[atom])

    def walk(
        self,
        jaxpr: Any,
        consts: list,
        args: list[str],
        scope: tuple[str, ...] = (),
        path: tuple[int, ...] = (),
        raw_args: list[tuple[str, Any]] | None = None,
        library: bool = False,
    ) -> list[str]:
        env: dict = {}
        const_of: dict = {}
        for var, name in zip(jaxpr.invars, args, strict=True):
            env[var] = name
        if raw_args is not None:  # an inlined call's operands that were constants stay constants
            const_of.update({v: a[1] for v, a in zip(jaxpr.invars, raw_args, strict=True) if a[0] == "const"})
        for var, c in zip(jaxpr.constvars, consts, strict=True):
            const_of[var] = c
            try:
                env[var] = "lit:" + _literal_source(c, c.dtype)
            except (_Unrenderable, AttributeError):
                self.unrenderable.add("array constant")
                env[var] = "lit:None"
        for e in jaxpr.eqns:
            ins = [self.operand(a, env) for a in e.invars]
            raw_ins = [self.raw_operand(a, env, const_of) for a in e.invars] if self.keep else None
            name = e.primitive.name
            here = (
                scope if library else scope + _name_stack(e)
            )  # jax's own scopes (einsum's) are not the user's
            if (
                name == "scan"
                and self.unroll_scans
                and 0 < int(e.params.get("length", 0)) <= MAX_UNROLLED_SCAN
                and _has_matmul(e.params["jaxpr"].jaxpr)
            ):
                unrolled = _unrolled_scan(e)  # a layer stack: each layer's regions become the model's own
                outs = self.walk(unrolled.jaxpr, list(unrolled.consts), ins, here, path, raw_ins)
                for var, o in zip(e.outvars, outs, strict=True):
                    env[var] = o
                continue
            inner = e.params.get("jaxpr", e.params.get("call_jaxpr", e.params.get("fun_jaxpr")))
            if name in _INLINE and inner is not None:
                closed_consts = list(getattr(inner, "consts", []))
                body = getattr(inner, "jaxpr", inner)
                user_fn = _user_function(body)
                inner_scope, inner_path = here, path
                in_library = user_fn is not None and _installed(_function_file(body))
                if in_library:  # an installed library's helper (Flax's remat wrapper, a model library's
                    user_fn = None  # jitted mask builder): its named scopes count, it is no boundary itself
                if user_fn is not None:  # the user's own function: a boundary they drew
                    self.calls += 1
                    inner_scope, inner_path = here + (user_fn,), path + (self.calls,)
                outs = self.walk(
                    body,
                    closed_consts,
                    ins,
                    inner_scope,
                    inner_path,
                    raw_ins,
                    library=user_fn is None and not in_library,
                )
                for var, o in zip(e.outvars, outs, strict=True):
                    env[var] = o
                continue
            self.census[name] += 1
            subs = self._bodies(e, ins) if name in _CONTROL else []
            params: dict[str, str] = {}
            for k, v in e.params.items():
                if (k in _DROP_PARAMS and v is None) or k in _CONTROL.get(name, ()):
                    continue
                try:
                    params[k] = param_source(v)
                except _Unrenderable:
                    self.unrenderable.add(name)
            out_names = []
            for var in e.outvars:
                n = self.fresh()
                env[var] = n
                out_names.append(n)
            self.eqns.append(
                Equation(
                    primitive=name,
                    inputs=ins,
                    outputs=out_names,
                    out_specs=[_spec(v.aval) for v in e.outvars],
                    params=params,
                    scope="/".join(here),
                    source=_user_source(e),
                    subprograms=subs,
                )
            )
            if self.keep:
                self.raw.append((e, raw_ins, path))
        outs = [self.operand(a, env) for a in jaxpr.outvars]
        if self.keep:
            for a in jaxpr.outvars:  # an output that is a constant: remember its value by its text
                r = self.raw_operand(a, env, const_of)
                if r[0] == "const":
                    self.const_values[self.operand(a, env)] = r[1]
        return outs

    def _bodies(self, e: Any, ins: list[str]) -> list[SubProgram]:
        """The bodies of control-flow equation `e` (operands `ins`) as subprograms, walked like the program
        (nested calls inlined, names from the same counter, nothing unrolled inside a loop)."""
        p = e.params
        if e.primitive.name == "cond":
            return [self._sub(f"branch{k}", b, [], len(b.jaxpr.invars)) for k, b in enumerate(p["branches"])]
        if e.primitive.name == "scan":
            nc = int(p["num_consts"])
            return [self._sub("body", p["jaxpr"], ins[:nc], len(p["jaxpr"].jaxpr.invars) - nc)]
        cn, bn = int(p["cond_nconsts"]), int(p["body_nconsts"])
        n = len(p["body_jaxpr"].jaxpr.invars) - bn
        return [
            self._sub("cond", p["cond_jaxpr"], ins[:cn], n),
            self._sub("body", p["body_jaxpr"], ins[cn : cn + bn], n),
        ]

    def _sub(self, role: str, closed: Any, outer: list[str], n_params: int) -> SubProgram:
        """One body: its first invars are the outer operands `outer` (closed over), the rest `n_params`
        fresh parameters. Its equations stay out of this program's list, census and raw twins."""
        saved = (self.eqns, self.raw, self.census, self.keep, self.unroll_scans)
        self.eqns, self.raw, self.census = [], [], collections.Counter()
        self.keep, self.unroll_scans = False, False
        try:
            params = [self.fresh() for _ in range(n_params)]
            body = getattr(closed, "jaxpr", closed)
            outs = self.walk(body, list(getattr(closed, "consts", [])), [*outer, *params], library=True)
            return SubProgram(role=role, inputs=params, equations=self.eqns, outputs=outs)
        finally:
            self.eqns, self.raw, self.census, self.keep, self.unroll_scans = saved


# A scan longer than this stays one equation (its body is not split into regions): 128 covers every layer
# stack of a production decoder (Llama-3-70B: 80 layers) without unrolling a long time loop.
MAX_UNROLLED_SCAN = 128


def _has_matmul(jaxpr: Any) -> bool:
    """Whether a scan body does matmuls (a layer stack, unrolled into its layers) rather than only
    elementwise steps (a recurrence over time, kept as one scan whatever its length)."""
    from jax.extend.core import ClosedJaxpr, Jaxpr

    for e in jaxpr.eqns:
        if e.primitive.name in ("dot_general", "conv_general_dilated", "ragged_dot_general"):
            return True
        for v in e.params.values():
            for sub in v if isinstance(v, (tuple, list)) else (v,):
                if isinstance(sub, ClosedJaxpr) and _has_matmul(sub.jaxpr):
                    return True
                if isinstance(sub, Jaxpr) and _has_matmul(sub):
                    return True
    return False


def _unrolled_scan(eqn: Any) -> Any:
    """The scan `eqn` as straight-line jax: its body once per iteration (`x[i]` sliced from each scanned
    input, the carries threaded, the per-iteration outputs stacked), each equation keeping its named scopes.

    A model that scans its layers (stacked weights, lax.scan or nn.scan) is one `scan` equation; unrolled,
    its attention and MLP are regions like any other, merged by signature with a count of the layers."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax._src import core as jax_core  # eval_jaxpr re-binds under each equation's own name stack

    p = eqn.params
    body = p["jaxpr"]
    n_consts, n_carry, length = int(p["num_consts"]), int(p["num_carry"]), int(p["length"])
    n_ys = len(body.jaxpr.outvars) - n_carry

    def run(*ops: Any) -> tuple[Any, ...]:
        consts, carry, xs = (
            ops[:n_consts],
            list(ops[n_consts : n_consts + n_carry]),
            ops[n_consts + n_carry :],
        )
        ys: list[list[Any]] = [[] for _ in range(n_ys)]
        order = range(length - 1, -1, -1) if p.get("reverse") else range(length)
        for i in order:
            x_i = [lax.index_in_dim(x, i, keepdims=False) for x in xs]
            outs = jax_core.eval_jaxpr(body.jaxpr, body.consts, *consts, *carry, *x_i)
            carry = list(outs[:n_carry])
            for j, y in enumerate(outs[n_carry:]):
                ys[j].append(y)
        if p.get("reverse"):
            ys = [col[::-1] for col in ys]
        return (*carry, *(jnp.stack(col) for col in ys))

    return jax.make_jaxpr(run)(*(v.aval for v in eqn.invars))


def _name_stack(eqn: Any) -> tuple[str, ...]:
    """The named scopes around `eqn` inside its own jaxpr ("attention/sdpa" -> ("attention", "sdpa")).

    jnp.einsum scopes itself by its spec ("bqd,bkd->bqk"), and a transform marks what it traced ("vmap()",
    "vmap(BTNH,BSNH->BNTS)", "jvp()"): neither is a boundary the user drew."""
    text = str(getattr(eqn.source_info, "name_stack", "") or "")
    return tuple(p for p in text.split("/") if p and "->" not in p and not _TRANSFORM.match(p))


def _jax_dir() -> str:
    import os

    import jax

    return os.path.dirname(os.path.abspath(jax.__file__))


def _user_function(body: Any) -> str | None:
    """The name of the function a nested call traced, when the user wrote it (not jax's own helpers)."""
    info = getattr(body, "debug_info", None)
    src = getattr(info, "func_src_info", None) or ""
    if not src or " at " not in src:
        return None
    fn, _, where = src.partition(" at ")
    import os

    if os.path.abspath(where.rsplit(":", 1)[0]).startswith(_jax_dir()):
        return None
    return fn.strip() or None


def _function_file(body: Any) -> str:
    info = getattr(body, "debug_info", None)
    src = getattr(info, "func_src_info", None) or ""
    return src.partition(" at ")[2].rsplit(":", 1)[0]


# Frameworks a model is written with: a line inside them (nn.Dense's matmul) is not where the model writes
# the op; a model library's own line (gemma's attention, recurrentgemma's RG-LRU) is.
_FRAMEWORKS = {"flax", "equinox", "haiku", "optax", "jaxtyping", "typeguard", "einops", "penzai", "treescope"}


def _framework(path: str) -> bool:
    parts = path.replace("\\", "/").split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            i = parts.index(marker)
            return i + 1 < len(parts) and parts[i + 1] in _FRAMEWORKS
    return False


def _user_source(eqn: Any) -> str:
    """ "file:line (function)" of the user frame that made `eqn` ("" when jax cannot say)."""
    try:
        from jax._src import source_info_util

        frames = list(source_info_util.user_frames(eqn.source_info.traceback))
    except Exception:
        return ""
    # jax skips its own frames only: a Flax/Equinox layer is not where the model writes the op; a model
    # library's own line is (Gemma's attention in gemma/modules.py, not the user's one `apply` line)
    frame = next((f for f in frames if not _framework(f.file_name)), frames[0] if frames else None)
    if frame is None:
        return ""
    return f"{frame.file_name}:{frame.start_line} ({frame.function_name})"


def _installed(path: str) -> bool:
    """Whether `path` is an installed library's file (site-packages), not the user's own code."""
    parts = path.replace("\\", "/").split("/")
    return "site-packages" in parts or "dist-packages" in parts


def _trace(ref: Any, size: str) -> tuple[list, Any, _Flattener, list[str], list[str], bool]:
    """(input leaves, closed jaxpr, flattened equations, input names, output names, nested?) at `size`."""
    import jax

    shapes = ref.input_shapes(size)
    leaves = jax.tree_util.tree_leaves(shapes)
    closed = jax.make_jaxpr(ref.workload)(*shapes)
    flat = _Flattener()
    names = [f"x{i}" for i in range(len(leaves))]
    outs = flat.walk(closed.jaxpr, list(closed.consts), names)
    return leaves, closed, flat, names, outs, len(leaves) != len(shapes)


def _variant(main: _Flattener, leaves: list, closed: Any, flat: _Flattener) -> SizeVariant:
    """What differs between the main trace and another size's trace of the same program."""
    out = SizeVariant(
        inputs=[_spec(s) for s in leaves], out_specs=[_spec(v.aval) for v in closed.jaxpr.outvars]
    )
    a, b = main.eqns, flat.eqns
    if len(a) != len(b) or any(x.primitive != y.primitive for x, y in zip(a, b, strict=True)):
        first = next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x.primitive != y.primitive),
            min(len(a), len(b)),
        )
        out.mismatch = f"{len(b)} equations vs {len(a)}; they first differ at equation {first}"
        return out
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        params = {k: v for k, v in y.params.items() if x.params.get(k) != v}
        lits = {
            j: q
            for j, (p, q) in enumerate(zip(x.inputs, y.inputs, strict=True))
            if p != q and q.startswith("lit:")
        }
        shapes = [s.shape for s in y.out_specs]
        if params:
            out.params[i] = params
        if lits:
            out.literals[i] = lits
        if shapes != [s.shape for s in x.out_specs]:
            out.shapes[i] = shapes
    return out


def _tied_keys(sizes_table: dict[str, dict], derived: Any) -> list[str]:
    """SIZES keys that change with size yet equal another key at every size traced (SIZES and the derived
    size): 28k's batch_size and in_channels, its height and width. A kernel written from input shapes cannot
    tell such dims apart from these traces, so describe also traces the returned keys each moved alone."""
    tables = [dict(t) for t in sizes_table.values()] + ([dict(derived.dims)] if derived.ok else [])
    keys = [k for k in tables[0] if all(isinstance(t.get(k), int) for t in tables)] if tables else []
    values = {k: tuple(t[k] for t in tables) for k in keys}
    moving = [k for k in keys if len(set(values[k])) > 1]
    # each key but the first of its tied group: moving those alone tells every one of the group apart
    return [k for n, k in enumerate(moving) if any(values[j] == values[k] for j in moving[:n])]


def describe(reference: str, size: str | None = None) -> ProgramDescription:
    """Trace `reference`'s workload at `size` (default: small if it has one, else its first size), and at
    its other sizes and the derived check size for `variants` (tracing never allocates, so production
    sizes are cheap)."""
    from maxkernel.tpu_tools.problem.reference import load_reference
    from maxkernel.tpu_tools.problem.sizes import DERIVED, UNALIGNED

    ref = load_reference(reference)
    if size is None:
        size = "small" if "small" in ref.info.sizes else ref.info.sizes[0]
    if size not in ref.info.sizes:
        raise UsageError(f"reference {ref.info.name!r} has no size {size!r}; it has {ref.info.sizes}")
    leaves, closed, flat, names, outs, nested = _trace(ref, size)
    variants = {}
    for other in ref.info.sizes:
        if other != size:
            variants[other] = _variant(flat, *_trace(ref, other)[:3])
    # the derived check size too: a number the SIZES keep fixed may move there (GQA's group size does
    # when the kv heads grow alone), and a kernel read from these traces must follow it, or say it cannot
    derived = ref.derived_size()
    if size != DERIVED and derived.ok:
        variants[DERIVED] = _variant(flat, *_trace(ref, DERIVED)[:3])
    alone = derived.unaligned.alone if derived.ok else {}
    for dim in (k for k in _tied_keys(ref.sizes_table, derived) if k in alone):
        # two dims equal at every size so far (28k's batch and channels) are two numbers to a kernel
        # written from these traces only where a size moves one alone: the shape-contract probe's do
        name = f"{UNALIGNED}:{dim}"
        if name == size or name in variants:
            continue
        try:
            variants[name] = _variant(flat, *_trace(ref, name)[:3])
        except Exception:  # noqa: BLE001 - a size the model cannot take (heads not dividing width) is no
            continue  # evidence either way: the other sizes still tell
    notes = []
    if nested:
        notes.append("inputs are nested pytrees; names follow their flattened leaves")
    if ref.info.mesh is not None:
        notes.append(
            f"multi-chip: write jax.shard_map over the mesh {ref.info.mesh.describe()} with the pallas_call "
            "inside; move data between chips with remote DMAs, not XLA collectives (validate refuses those)"
        )
    return ProgramDescription(
        reference=ref.info.name,
        size=size,
        inputs=[_spec(s) for s in leaves],
        input_names=names,
        outputs=outs,
        out_specs=[_spec(v.aval) for v in closed.jaxpr.outvars],
        equations=flat.eqns,
        census=dict(flat.census),
        unrenderable=sorted(flat.unrenderable),
        notes=notes,
        mesh=ref.info.mesh,
        variants=variants,
    )


def describe_job(reference: str, size: str | None = None) -> dict:
    """Pool job: the ProgramDescription as a JSON-able dict, or {"error": ...} for the caller's mistake."""
    try:
        return describe(reference, size).model_dump(mode="json")
    except UsageError as e:
        return {"error": str(e)}
    except Exception as e:  # the reference itself fails to trace: say where, it is not our bug
        return {"error": f"reference failed to trace: {type(e).__name__}: {str(e)[:500]}"}


def describe_in_child(
    evaluator: Any,
    reference: str,
    size: str | None = None,
    *,
    timeout_s: float = 120.0,
    on_progress: Any = None,
    cancel: Any = None,
) -> ProgramDescription:
    """Trace in a pool child (the reference is user code); UsageError for a reference that will not trace."""
    from maxkernel.tpu_tools.judge.outcomes import abs_reference

    if on_progress:
        on_progress("trace the reference")
    outcome = evaluator._run(
        "maxkernel.tpu_tools.problem.program:describe_job",
        {"reference": abs_reference(reference), "size": size},
        timeout_s=timeout_s,
        on_progress=on_progress,
        cancel=cancel,
    )
    if outcome.status != "ok" or outcome.result is None:
        raise UsageError(f"tracing the reference ended with {outcome.status}: {outcome.message}")
    if "error" in outcome.result:
        raise UsageError(outcome.result["error"])
    return ProgramDescription.model_validate(outcome.result)
