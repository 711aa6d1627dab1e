"""Read Pallas kernels out of Python source with `ast`: one record per kernel function given to a pallas_call.

Parsing (not importing) keeps indexing cheap and safe: a user's folder is never executed, and jax's own
ops are read from the installed package's files. A record holds the kernel function, the function that
calls `pallas_call` (its grid and BlockSpecs), the primitives used inside the kernel, the launch pattern,
feature tags (scalar prefetch, manual DMA, `vmem_limit_bytes`, ...) and what the kernel does.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from maxkernel.tpu_tools.problem import safe_ast

# Canonical short prefixes for the modules kernels call into (import aliases are resolved to these).
_CANONICAL = {
    "jax.experimental.pallas.tpu": "pltpu",
    "jax.experimental.pallas": "pl",
    "jax.numpy": "jnp",
    "jax.lax": "lax",
    "jax.nn": "jax.nn",
    "jax.random": "jax.random",
    "jax": "jax",
    "functools": "functools",
    "math": "math",
    "numpy": "np",
}
_KEEP_PREFIXES = ("pl.", "pltpu.", "jnp.", "lax.", "jax.")

# feature tag -> primitive names (after canonicalisation) or keyword names that show it
_FEATURES: dict[str, tuple[str, ...]] = {
    "scalar_prefetch": ("pltpu.PrefetchScalarGridSpec", "num_scalar_prefetch"),
    "manual_dma": ("pltpu.make_async_copy", "pltpu.async_copy"),
    "remote_dma": ("pltpu.make_async_remote_copy", "pltpu.semaphore_signal", "lax.axis_index"),
    "semaphore": ("pltpu.SemaphoreType", "pltpu.semaphore_wait", "pltpu.semaphore_signal"),
    "vmem_scratch": ("pltpu.VMEM",),
    "smem": ("pltpu.SMEM",),
    "hbm_any": ("pltpu.ANY", "pl.ANY", "pltpu.MemorySpace"),
    "vmem_limit_bytes": ("vmem_limit_bytes",),
    "dimension_semantics": ("dimension_semantics",),
    "input_output_aliases": ("input_output_aliases",),
    "cost_estimate": ("pl.CostEstimate", "cost_estimate"),
    "pl_when": ("pl.when",),
    "fori_loop": ("lax.fori_loop", "jax.lax.fori_loop"),
    "emit_pipeline": ("pltpu.emit_pipeline",),
    "prng": ("pltpu.prng_seed", "pltpu.prng_random_bits", "pltpu.stateful_bits"),
    "pl_ds": ("pl.ds", "pl.dslice"),
}


@dataclass
class ParsedKernel:
    """One kernel function and the pallas_call that launches it (all text, no jax objects)."""

    kernel: str  # the kernel function's name ('?' when the call's first argument cannot be resolved)
    wrapper: str  # the function whose body holds the pallas_call ('<module>' at top level)
    kernel_source: str
    helper_source: str  # same-module functions the kernel calls (a dispatcher's real body)
    wrapper_source: str
    call_source: str  # the pallas_call expression itself
    doc: str  # docstrings of kernel, wrapper and module (first paragraph of the module's)
    primitives: list[str] = field(default_factory=list)  # calls inside the kernel, canonical names
    launch: list[str] = field(default_factory=list)  # calls in the wrapper: BlockSpec, GridSpec, ...
    pattern: str = ""  # grid / BlockSpec / memory-space summary
    features: list[str] = field(default_factory=list)
    what: list[str] = field(default_factory=list)
    line: int = 0  # 1-based line of the kernel function (or of the call)


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> canonical prefix, from the module's imports (`pl`, `pltpu`, `jnp`, `lax`...)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    out[a.asname] = a.name
                else:
                    out[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return {k: _canonical(v) for k, v in out.items()}


def _canonical(module: str) -> str:
    for full in sorted(_CANONICAL, key=len, reverse=True):
        if module == full or module.startswith(full + "."):
            return _CANONICAL[full] + module[len(full) :]
    return module


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _call_name(call: ast.Call, aliases: dict[str, str]) -> str | None:
    name = _dotted(call.func)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    base = aliases.get(head, head)
    return f"{base}.{rest}" if rest else base


def _calls(node: ast.AST, aliases: dict[str, str]) -> list[str]:
    names = []
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            name = _call_name(n, aliases)
            if name:
                names.append(name)
        elif isinstance(n, ast.Attribute) and n.attr[:1].isupper():  # pltpu.ANY, SemaphoreType.DMA: no call
            name = _dotted(n)
            if name and name.split(".")[0] in aliases:
                head, _, rest = name.partition(".")
                names.append(f"{aliases[head]}.{rest}")
        elif isinstance(n, ast.keyword) and n.arg:
            names.append(n.arg)
    return names


class _Scope(ast.NodeVisitor):
    """Every function def (with its enclosing function) and every pallas_call (with its enclosing def)."""

    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases
        self.defs: dict[str, list[tuple[ast.FunctionDef, ast.FunctionDef | None]]] = {}
        self.calls: list[tuple[ast.Call, ast.FunctionDef | None]] = []
        self._stack: list[ast.FunctionDef] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.defs.setdefault(node.name, []).append((node, self._stack[-1] if self._stack else None))
        self._stack.append(node)
        self.generic_visit(node)
        self._stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:  # a helper class (DMA descriptors) counts too
        self.defs.setdefault(node.name, []).append((node, None))  # type: ignore[arg-type]
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _call_name(node, self.aliases) or ""
        if name.endswith("pallas_call"):
            self.calls.append((node, self._stack[-1] if self._stack else None))
        self.generic_visit(node)


def _assigned(scope: ast.AST | None, name: str) -> ast.expr | None:
    """The value last assigned to `name` directly in `scope` (for `kernel = functools.partial(...)`)."""
    if scope is None:
        return None
    value = None
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
            value = n.value
    return value


def _kernel_name(arg: ast.expr, wrapper: ast.FunctionDef | None, depth: int = 0) -> str | None:
    """The function a pallas_call's first argument names: `k`, `functools.partial(k, ...)`, a local alias."""
    if isinstance(arg, ast.Name):
        value = _assigned(wrapper, arg.id) if depth < 2 else None
        if value is not None and not isinstance(value, ast.Constant) and value is not arg:
            return _kernel_name(value, wrapper, depth + 1) or arg.id
        return arg.id
    if isinstance(arg, ast.Attribute):
        return arg.attr
    if isinstance(arg, ast.IfExp):  # `kernel = a if cond else b`: the first branch is the example
        return _kernel_name(arg.body, wrapper, depth + 1)
    if isinstance(arg, ast.Call) and arg.args and (_dotted(arg.func) or "").endswith("partial"):
        return _kernel_name(arg.args[0], wrapper, depth + 1)
    return None


def _find_def(scope: _Scope, name: str, wrapper: ast.FunctionDef | None) -> ast.FunctionDef | None:
    cands = scope.defs.get(name, [])
    for node, parent in cands:  # prefer a def nested in the wrapper, then a top-level one
        if parent is wrapper and wrapper is not None:
            return node
    for node, parent in cands:
        if parent is None and isinstance(node, ast.FunctionDef):
            return node
    return next((n for n, _ in cands if isinstance(n, ast.FunctionDef)), None)


def _helpers(fn: ast.FunctionDef, scope: _Scope, depth: int = 2) -> list[ast.FunctionDef]:
    """Same-module functions the kernel names (two levels deep): their primitives count as the kernel's.

    A thin dispatcher (`kernel = _single_step if ... else _tiled; kernel(...)`) is common in jax's ops.
    """
    out: list[ast.FunctionDef] = []
    frontier = [fn]
    for _ in range(depth):
        nxt = []
        for f in frontier:
            for n in ast.walk(f):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in scope.defs:
                    node = scope.defs[n.id][0][0]
                    if node is not fn and node not in out:
                        out.append(node)
                        nxt.append(node)
        frontier = nxt
    return out


def _prefetches(wrapper: ast.AST) -> bool:
    """Whether a grid spec prefetches scalars (`num_scalar_prefetch=0` is a plain grid)."""
    for n in ast.walk(wrapper):
        if isinstance(n, ast.keyword) and n.arg == "num_scalar_prefetch":
            return not (isinstance(n.value, ast.Constant) and n.value.value == 0)
    return False


def _pattern(call: ast.Call, wrapper_calls: list[str], wrapper: ast.AST, src: str) -> str:
    kws = {k.arg: k.value for k in call.keywords if k.arg}
    parts = []
    grid = kws.get("grid")
    if grid is None:  # grid inside a GridSpec / PrefetchScalarGridSpec built in the wrapper
        for n in ast.walk(wrapper):
            if isinstance(n, ast.Call) and (_dotted(n.func) or "").endswith("GridSpec"):
                grid = next((k.value for k in n.keywords if k.arg == "grid"), None)
                prefetch = next((k.value for k in n.keywords if k.arg == "num_scalar_prefetch"), None)
                if prefetch is not None:
                    parts.append(f"PrefetchScalarGridSpec(num_scalar_prefetch={ast.unparse(prefetch)})")
                break
    if grid is not None:
        parts.append(f"grid={ast.unparse(grid)}")
    n_specs = sum(1 for c in wrapper_calls if c.endswith("BlockSpec"))
    if n_specs:
        parts.append(f"{n_specs} BlockSpec")
    for space in ("pltpu.VMEM", "pltpu.SMEM", "pltpu.ANY", "pl.ANY"):
        if space in wrapper_calls:
            parts.append(f"{space} x{wrapper_calls.count(space)}")
    for n in ast.walk(wrapper):
        if isinstance(n, ast.keyword) and n.arg == "dimension_semantics":
            parts.append(f"dimension_semantics={ast.unparse(n.value)}")
            break
    if "vmem_limit_bytes" in wrapper_calls:
        parts.append("vmem_limit_bytes set")
    return "; ".join(parts)


def _what(kernel: str, wrapper: str, prims: set[str], features: set[str], path: str) -> list[str]:
    """What the kernel does, from its primitives and names (coarse tags a query can name)."""
    names = f"{path} {kernel} {wrapper}".lower()
    short = {p.rsplit(".", 1)[-1] for p in prims}
    tags = []
    dot = bool(short & {"dot", "dot_general", "matmul", "einsum"})
    softmaxish = "exp" in short and bool(short & {"max", "maximum"})
    if dot:
        tags.append("matmul")
    if any(w in names for w in ("attention", "attn", "flash", "mha", "gqa")) or (dot and softmaxish):
        tags.append("attention")
    if "paged" in names:
        tags.append("paged attention")
    if any(w in names for w in ("gmm", "grouped", "megablox", "ragged_dot")):
        tags.append("grouped matmul")
    if short & {"sum", "mean", "max", "min", "logsumexp", "reduce_sum", "reduce_max", "argmax"}:
        tags.append("reduction")
    if short & {"rsqrt", "var"} or "norm" in names:
        tags.append("normalization")
    if short & {"fori_loop", "scan", "while_loop", "associative_scan", "cumsum"}:
        tags.append("scan")
    if "scalar_prefetch" in features or "gather" in names or "paged" in names:
        tags.append("gather")
    if "remote_dma" in features:
        tags.append("remote DMA")
    elif "manual_dma" in features:
        tags.append("DMA")
    if "prng" in features or any(w in names for w in ("random", "philox", "threefry", "prng")):
        tags.append("random numbers")
    if not tags:
        tags.append("elementwise")
    return tags


def _segment(src: str, node: ast.AST | None) -> str:
    return (ast.get_source_segment(src, node) or "") if node is not None else ""


def parse_kernels(src: str, path: str = "<string>") -> list[ParsedKernel]:
    """Every (kernel function, pallas_call) pair in `src`; [] when there is none or it does not parse."""
    try:
        tree = safe_ast.parse(src)
    except SyntaxError:
        return []
    aliases = _aliases(tree)
    scope = _Scope(aliases)
    scope.visit(tree)
    module_doc = (ast.get_docstring(tree) or "").split("\n\n")[0]
    out: dict[str, ParsedKernel] = {}
    for call, wrapper in scope.calls:
        name = _kernel_name(call.args[0], wrapper) if call.args else None
        fn = _find_def(scope, name, wrapper) if name else None
        key = fn.name if fn is not None else f"?{call.lineno}"
        if key in out:
            continue  # the same kernel launched by a second call: the first launch is the example
        body_calls = _calls(fn, aliases) if fn is not None else []
        helpers = [h for h in (_helpers(fn, scope) if fn is not None else []) if h is not wrapper]
        for helper in helpers:
            body_calls += _calls(helper, aliases)
        wrapper_node = wrapper if wrapper is not None else call
        wrapper_calls = _calls(wrapper_node, aliases)
        prims = sorted({c for c in body_calls if c.startswith(_KEEP_PREFIXES)})
        launch = sorted({c for c in wrapper_calls if c.startswith(("pl.", "pltpu."))})
        every = set(body_calls) | set(wrapper_calls)
        features = {tag for tag, marks in _FEATURES.items() if every & set(marks)}
        if not _prefetches(wrapper_node):
            features.discard("scalar_prefetch")
        features = sorted(features)
        docs = [ast.get_docstring(fn) if fn else None, ast.get_docstring(wrapper) if wrapper else None]
        kernel = fn.name if fn is not None else (name or "?")
        wname = wrapper.name if wrapper is not None else "<module>"
        out[key] = ParsedKernel(
            kernel=kernel,
            wrapper=wname,
            kernel_source=_segment(src, fn),
            helper_source="\n\n".join(_segment(src, h) for h in helpers),
            wrapper_source=_segment(src, wrapper) if wrapper is not None and wrapper is not fn else "",
            call_source=_segment(src, call),
            doc="\n\n".join(d for d in [*docs, module_doc] if d),
            primitives=prims,
            launch=launch,
            pattern=_pattern(call, wrapper_calls, wrapper_node, src),
            features=features,
            what=_what(kernel, wname, set(prims), set(features), path),
            line=fn.lineno if fn is not None else call.lineno,
        )
    return list(out.values())


def reference_primitives(src: str) -> tuple[dict, list[str]]:
    """A reference module's CONFIG (literal parts) and the jnp/lax/jax calls its functions make.

    Lets a query be built from a reference without importing it (the prompts' "what is this task").
    """
    try:
        tree = safe_ast.parse(src)
    except SyntaxError:
        return {}, []
    aliases = _aliases(tree)
    config: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "CONFIG" for t in node.targets
        ):
            if isinstance(node.value, ast.Dict):
                for k, v in zip(node.value.keys, node.value.values, strict=False):
                    try:
                        config[safe_ast.literal_eval(k)] = safe_ast.literal_eval(v)  # type: ignore[arg-type]
                    except (ValueError, TypeError, SyntaxError):
                        continue
    skip = {"create_inputs", "get_flops"}
    prims: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name not in skip:
            prims |= {c for c in _calls(node, aliases) if c.startswith(("jnp.", "lax.", "jax."))}
    drop = {"jax.Array", "jnp.float32", "jnp.bfloat16", "jnp.float16", "jnp.int32", "jax.random.key"}
    return config, sorted(prims - drop)
