"""Default comparison tolerances per output dtype; a reference's CONFIG atol/rtol or the caller override them."""

from __future__ import annotations

from maxkernel.tpu_tools.reports import Tolerance

# |actual - expected| <= atol + rtol * |expected|, elementwise.
# bf16 matches JAXBench's harness (1e-2/1e-2). f32 is tight on purpose: a TPU f32 matmul at default
# precision uses bf16 passes, so a task that needs looser bounds says so in its CONFIG.
_DEFAULTS = {
    "bfloat16": (1e-2, 1e-2),
    "float16": (1e-3, 1e-3),
    "float32": (1e-4, 1e-3),
    "float64": (1e-8, 1e-7),
}


def default_tolerance(dtype: str) -> Tolerance:
    if dtype in _DEFAULTS:
        atol, rtol = _DEFAULTS[dtype]
        return Tolerance(atol=atol, rtol=rtol, source=f"default for {dtype}")
    if "int" in dtype or dtype == "bool":
        return Tolerance(atol=0.0, rtol=0.0, source=f"default for {dtype} (exact)")
    atol, rtol = _DEFAULTS["float32"]
    return Tolerance(atol=atol, rtol=rtol, source=f"default for {dtype} (treated as float32)")


def choose_tolerance(
    dtype: str,
    *,
    ref_atol: float | None,
    ref_rtol: float | None,
    atol: float | None = None,
    rtol: float | None = None,
) -> Tolerance:
    if atol is not None or rtol is not None:
        base = default_tolerance(dtype)
        return Tolerance(
            atol=base.atol if atol is None else atol,
            rtol=base.rtol if rtol is None else rtol,
            source="caller",
        )
    if ref_atol is not None or ref_rtol is not None:
        base = default_tolerance(dtype)
        return Tolerance(
            atol=base.atol if ref_atol is None else float(ref_atol),
            rtol=base.rtol if ref_rtol is None else float(ref_rtol),
            source="reference CONFIG",
        )
    return default_tolerance(dtype)
