"""What a dot's declared precision costs and computes on a TPU: its MXU passes, in XLA and in a Mosaic kernel.

A float32 dot is not one thing on a TPU. XLA computes it at DEFAULT precision with its operands rounded to
bf16, in one MXU pass with f32 accumulation (`BF16_BF16_F32`); HIGH in 3 bf16 passes (`BF16_BF16_F32_X3`);
HIGHEST in 6 (JAX's "Matmul precision" page names the algorithms and the TPU defaults). A Mosaic kernel's
f32 dot is one pass of f32 `vmatmul`s at DEFAULT and six at HIGHEST; Mosaic lowers no other precision.
The estimate costs each side at the passes it really takes, and the offline model writes each kernel dot
at the numerics XLA gives the reference's dot, so that speed is compared at the same numerics.

What the compiled programs show (v6e, libtpu pinned, 1024^3 f32 product, 512^3 blocks in the kernel): XLA
DEFAULT issues 1024 `vmatmul.bf16`; XLA HIGH and HIGHEST `vmatmul.f32`s in 27136 and 43296 bundles against
4354. The kernel: 256 `vmatmul.f32` a block at DEFAULT, 1536 at HIGHEST, 128 `vmatmul.bf16` with its
operands cast to bf16 (994 bundles against 1001 at DEFAULT: the f32 rate is not in the bundles, see
chips.F32_MXU_SLOWDOWN).

`jax_default_matmul_precision` needs nothing here: a dot traced under it carries it as its `precision`.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["FLOAT32_OPERANDS", "declared_passes", "dot_passes", "is_wide", "mxu_work", "precision_passes"]

# Operand dtypes XLA rounds (DEFAULT) or splits (HIGH, HIGHEST) into bf16 before the MXU.
FLOAT32_OPERANDS = ("float32", "f32", "float64", "f64")
_INT8 = ("int8", "uint8", "s8", "u8")

# Passes by the name of a precision or a dot algorithm preset (jax.lax.Precision, lax.DotAlgorithmPreset).
_BY_NAME = {
    "DEFAULT": 1, "BF16_BF16_F32": 1, "BF16_BF16_BF16": 1, "BFLOAT16": 1,
    "HIGH": 3, "BF16_BF16_F32_X3": 3, "TF32_TF32_F32": 3, "TF32_TF32_F32_X3": 3, "TENSORFLOAT32": 3,
    "HIGHEST": 6, "BF16_BF16_F32_X6": 6, "F32_F32_F32": 6, "FLOAT32": 6, "F64_F64_F64": 6,
    "BF16_BF16_F32_X9": 9,
}  # fmt: skip


def _names(precision: Any) -> list[str]:
    """The precision or algorithm names in a jaxpr's `precision` param, its source text, or a config string."""
    import re

    if precision is None:
        return []
    if isinstance(precision, (tuple, list)):
        return [n for p in precision for n in _names(p)]
    name = getattr(precision, "name", None)
    if isinstance(name, str):  # a preset the table lacks (ANY_F8_ANY_F8_F32 ...) names nothing
        return [name.upper()] if name.upper() in _BY_NAME else []
    text = str(precision)
    found = re.findall(
        r"\b([A-Za-z0-9_]+)\b", text.replace("Precision.", " ").replace("DotAlgorithmPreset.", " ")
    )
    return [w.upper() for w in found if w.upper() in _BY_NAME]


def precision_passes(precision: Any) -> int:
    """bf16 MXU passes XLA takes on a TPU for an f32 dot at `precision` (None, a lax.Precision, a pair,
    a DotAlgorithmPreset, their source text, or a `jax_default_matmul_precision` value): 1, 3, 6 or 9.
    A pair takes the finer of its two."""
    return max((_BY_NAME[n] for n in _names(precision)), default=1)


def declared_passes(precision: Any) -> int | None:
    """`precision_passes`, or None where `precision` is set but names nothing in the table (an algorithm the
    judge's numerics cannot emulate: it then runs as written)."""
    if precision is not None and not _names(precision):
        return None
    return precision_passes(precision)


def is_wide(dtype: Any) -> bool:
    """Whether a dot operand of `dtype` is wider than bf16 on the MXU (f32: its precision decides)."""
    return str(dtype) in FLOAT32_OPERANDS


def mxu_work(
    lhs_dtype: Any, rhs_dtype: Any, precision: Any, *, mosaic: bool
) -> tuple[Literal["bfloat16", "float32", "int8"], int]:
    """(the MXU rate's dtype, passes) of one dot on a TPU: the time is flops x passes / the chip's rate for it.

    XLA (`mosaic=False`): f32 operands run as bf16 passes, their count set by the precision. A Mosaic
    kernel: f32 operands run as f32 `vmatmul`s, once at DEFAULT and six times at HIGHEST (an explicit
    `.astype(jnp.bfloat16)` in the kernel makes them bf16 operands: one bf16 pass). Narrower operands
    take one pass at their own rate."""
    d = (str(lhs_dtype), str(rhs_dtype))
    if all(x in _INT8 for x in d):
        return "int8", 1
    if not any(is_wide(x) for x in d):
        return "bfloat16", 1
    passes = precision_passes(precision)
    if mosaic:
        return "float32", 1 if passes == 1 else 6
    return "bfloat16", passes


def dot_passes(eqn: Any, *, mosaic: bool) -> tuple[Literal["bfloat16", "float32", "int8"], int]:
    """mxu_work of a jaxpr `dot_general` or `conv_general_dilated` equation (its operands' dtypes and
    its `precision` param)."""
    lhs, rhs = (getattr(v.aval, "dtype", "bfloat16") for v in eqn.invars[:2])
    return mxu_work(lhs, rhs, eqn.params.get("precision"), mosaic=mosaic)
