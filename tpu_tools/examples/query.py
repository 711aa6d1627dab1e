"""Turn what a role has in hand (free text, an operator, a reference's primitives, an error) into a search.

Words are matched by SQLite FTS5 (bm25); this module only decides which words, and which entry features
a result should have. Two small vocabularies do the translating:
- operator families: a task says `gqa_attention` or `ragged_dot`, a kernel says `flash_attention` or
  `gmm`; both sides are mapped to the same family words ("attention", "grouped matmul").
- Mosaic/Pallas error families (the guide's error table): an error says `would exceed memory ...
  space=vmem`; the fix lives in kernels that set `vmem_limit_bytes` and in the guide's VMEM section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# operator-name word -> family words that kernels and guide sections are described with
_FAMILIES: dict[str, str] = {
    "gemm": "matmul dot",
    "matmul": "matmul dot",
    "mm": "matmul dot",
    "bmm": "matmul dot batched",
    "linear": "matmul dot",
    "dense": "matmul dot",
    "mlp": "matmul dot",
    "swiglu": "matmul dot",
    "conv": "matmul",
    "conv2d": "matmul",
    "conv3d": "matmul",
    "attention": "attention softmax flash",
    "attn": "attention softmax flash",
    "mha": "attention softmax flash",
    "gqa": "attention softmax flash",
    "mla": "attention softmax flash",
    "flex": "attention softmax flash splash mask",
    "sparse": "splash mask",
    "causal": "attention causal mask",
    "flash": "attention softmax flash",
    "paged": "paged attention pages page_indices",
    "ragged": "ragged",
    "ragged_dot": "grouped matmul gmm megablox group_sizes",
    "grouped": "grouped matmul gmm megablox group_sizes",
    "gmm": "grouped matmul gmm megablox group_sizes",
    "megablox": "grouped matmul gmm megablox group_sizes",
    "moe": "grouped matmul gmm megablox group_sizes",
    "rmsnorm": "normalization rsqrt mean reduction",
    "layernorm": "normalization rsqrt mean reduction",
    "norm": "normalization reduction",
    "softmax": "softmax reduction exp max",
    "logsumexp": "reduction logsumexp exp max",
    "cross_entropy": "reduction logsumexp",
    "scan": "scan fori_loop",
    "ssd": "scan fori_loop",
    "mamba": "scan fori_loop",
    "retention": "scan fori_loop",
    "cumsum": "scan",
    "all_gather": "remote DMA all gather semaphore",
    "collective": "remote DMA semaphore",
    "dropout": "random numbers prng",
    "random": "random numbers prng",
}

# a reference's primitive (last name part) -> family words (what the computation is)
_PRIMITIVE_FAMILIES: dict[str, str] = {
    "einsum": "matmul",
    "dot": "matmul",
    "matmul": "matmul",
    "dot_general": "matmul",
    "ragged_dot": "grouped matmul gmm",
    "softmax": "softmax",
    "logsumexp": "logsumexp reduction",
    "rsqrt": "normalization",
    "cumsum": "scan",
    "associative_scan": "scan",
    "scan": "scan",
    "take_along_axis": "gather",
    "take": "gather",
}


@dataclass(frozen=True)
class ErrorFamily:
    """One family of Mosaic/Pallas failures and where its fix is shown."""

    name: str
    pattern: str  # regex, searched case-insensitively in the error text
    words: str  # what the guide section and the fixing kernels are described with
    features: tuple[str, ...] = ()  # entry features a kernel showing the fix has


ERROR_FAMILIES: tuple[ErrorFamily, ...] = (
    ErrorFamily(
        "vmem",
        r"vmem|resource_exhausted|would exceed memory|ran out of memory|scoped memory",
        "VMEM budgets vmem_limit_bytes smaller blocks double buffered scratch",
        ("vmem_limit_bytes",),
    ),
    ErrorFamily(
        "block_shape",
        r"divisible by 8 and 128|(?<!t)\(8, ?128\)|block shape",
        "block shapes divisibility rule divisible 8 128 full array dims",
    ),
    ErrorFamily(
        "memory_space_any",
        r"memory space any",
        "memory space ANY manual DMA BlockSpec memory_space",
        ("manual_dma",),
    ),
    ErrorFamily(
        "unimplemented_primitive",
        r"unimplemented primitive|not implemented|no lowering|unsupported (?:op|primitive)",
        "Unimplemented primitive lowering common errors fixes wrapper supported ops",
    ),
    ErrorFamily("f16", r"pack_subelements|float16|\bf16\b", "dtypes float16 bf16 f32 pack_subelements"),
    ErrorFamily("int_matmul", r"bad lhs/rhs|xi32", "dtypes int32 matmul cast int8 accumulator"),
    ErrorFamily(
        "legalize",
        r"failed to legalize|not supported.*layout|relayout|reshape|transpose",
        "layout tiling reshape transpose legalize wrapper",
    ),
    ErrorFamily("bounds", r"out.of.bound", "grid BlockSpec index maps out of bounds block indices cdiv"),
    ErrorFamily(
        "semantics",
        r"revisit|megacore|dimension.semantics",
        "dimension semantics megacore arbitrary parallel revisited",
        ("dimension_semantics",),
    ),
    ErrorFamily(
        "dma_hang",
        r"\bdma\b|semaphore|async_copy|timed? ?out|hang",
        "manual DMA semaphores start wait",
        ("manual_dma",),
    ),
    ErrorFamily(
        "prefetch", r"prefetch|\bsmem\b", "scalar prefetch SMEM PrefetchScalarGridSpec", ("scalar_prefetch",)
    ),
    ErrorFamily("cost", r"costestimate|cost_estimate", "cost estimates CostEstimate ints"),
    ErrorFamily("device_kind", r"unsupported tpu device kind", "testing on CPU interpret mode"),
    ErrorFamily(
        "numerics",
        r"\bnan\b|mismatch|wrong result|allclose|max_abs_err|tolerance",
        "accumulators pl.when initialise f32 accumulator preferred_element_type",
        ("pl_when",),
    ),
)

_STOP = set(
    "a an and are as at be by for from in into is it of on or that the this to with kernel kernels pallas tpu "
    "jax jnp lax pl pltpu py self none true false return def import file line error errors "
    "traceback most recent call last above exception direct cause following".split()
)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass
class Search:
    """What the index is asked: words for bm25, plus features and entry kinds to prefer."""

    words: list[str] = field(default_factory=list)
    features: set[str] = field(default_factory=set)
    families: list[str] = field(default_factory=list)  # error families recognised (for the report)
    mode: str = "text"
    primary: list[str] = field(default_factory=list)  # the main operation's words (count double)


def words_of(text: str) -> list[str]:
    """Search words: identifiers split on `_` and `.`, lowercased, stop words and numbers dropped."""
    out: list[str] = []
    for w in _WORD.findall(text):
        for part in [w, *re.split(r"[_.]", w)] if "_" in w else [w]:
            p = part.lower()
            if len(p) > 1 and p not in _STOP and p not in out:
                out.append(p)
    return out


def family_words(text: str) -> list[str]:
    """Family words for an operator / task name (`gqa_attention` -> attention softmax flash ...)."""
    low = text.lower()
    out: list[str] = []
    keys = sorted(_FAMILIES, key=len, reverse=True)
    for key in keys:
        if re.search(rf"(?<![a-z]){re.escape(key)}(?![a-z])", low.replace("-", "_")) or key in low.split("_"):
            out += _FAMILIES[key].split()
    return out


def primary_words(text: str) -> list[str]:
    """The family words of the operation named first: a fused op is named main op first, epilogues
    after (`matmul_gelu_softmax` is a matmul with a softmax epilogue, not a softmax kernel)."""
    low = text.lower().replace("-", "_")
    best: tuple[int, int, str] | None = None
    for key in _FAMILIES:
        m = re.search(rf"(?<![a-z]){re.escape(key)}(?![a-z])", low)
        if m and (best is None or (m.start(), -len(key)) < (best[0], best[1])):
            best = (m.start(), -len(key), key)
    return _FAMILIES[best[2]].split() if best else []


def primitive_words(primitives: list[str]) -> list[str]:
    """The primitives' own names plus what they compute (`jnp.einsum` + `jax.nn.softmax` -> attention)."""
    short = {w for p in primitives for w in words_of(p.rsplit(".", 1)[-1])}  # caller text: words only
    out = [s for s in short if s not in _STOP]
    for s in short:
        out += _PRIMITIVE_FAMILIES.get(s, "").split()
    return out  # matmul + softmax alone is not attention (a Gemm_Softmax task is not): names say that


def decisive_lines(error: str, limit: int = 6) -> str:
    """The lines of an error that say what went wrong: no traceback frames, source lines or carets."""
    keep = []
    for line in error.splitlines():
        s = line.strip()
        if not s or s.startswith(("File ", "^", "~", "Traceback", "During handling", "The above exception")):
            continue
        if re.match(r"^[\w.]*(Error|Exception|error|Exhausted|INTERNAL|RESOURCE_EXHAUSTED)\b", s) or ":" in s:
            keep.append(s)
    return "\n".join(keep[:limit]) if keep else error[:800]


def error_search(error: str) -> Search:
    """An error's families -> their words and features; the decisive lines' own words follow."""
    low = error.lower()
    fams = [f for f in ERROR_FAMILIES if re.search(f.pattern, low)]
    s = Search(mode="error", families=[f.name for f in fams])
    for f in fams:
        s.words += words_of(f.words)
        s.features |= set(f.features)
    prim = re.search(r"unimplemented primitive in pallas tpu lowering for \w+: (\w+)", low)
    if prim:
        s.words.append(prim.group(1))
    if not fams:  # unknown failure: search with the words of its decisive lines
        s.words += [w for w in words_of(re.sub(r"/\S+|0x[0-9a-f]+|%\d+", " ", decisive_lines(error)))][:30]
    return s


def build_search(
    query: str = "",
    operator: str = "",
    primitives: list[str] | None = None,
    error: str = "",
    config: dict | None = None,
) -> Search:
    """One search from any mix of inputs; an error's families lead, then operator, primitives and text."""
    s = error_search(error) if error.strip() else Search()
    names = " ".join(str((config or {}).get(k, "")) for k in ("operator", "name"))
    op_text = f"{operator} {names}".strip()
    if op_text:
        # only the main operation is widened to its family's words: widening an epilogue (the softmax
        # of matmul_gelu_softmax) would pull in kernels whose main work is that epilogue
        s.primary = primary_words(operator or str((config or {}).get("operator", "")) or op_text)
        s.words += words_of(op_text) + s.primary
        s.mode = "task" if config else ("operator" if s.mode == "text" else s.mode)
    if primitives:
        s.words += primitive_words(primitives)
        s.mode = s.mode if s.mode != "text" else "primitives"
    if query.strip():
        s.words += words_of(query) + family_words(query)
        if not op_text:  # a person's own words are what they asked for: they count over the family's
            s.primary += words_of(query)
    seen: set[str] = set()
    s.words = [w for w in s.words if not (w in seen or seen.add(w))]
    return s
