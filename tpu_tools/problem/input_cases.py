"""Extra input cases: the same reference at another size or with other values, built identically everywhere.

A case names size overrides (merged over one of the reference's SIZES) and a value distribution. The
distribution reshapes FLOAT inputs only (index and integer inputs drive shapes and gathers, so they are
left alone), deterministically from the seed, and keeps each input's dtype. Both validation children
call `transform_inputs` with the same (case, seed), so the candidate and the reference see the same
numbers without ever sharing a process.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.errors import UnusableCaseError, UsageError

Distribution = Literal[
    "normal",
    "uniform",
    "zeros",
    "ones",
    "constant",
    "large_magnitude",
    "small_magnitude",
    "negative",
    "mixed_sign",
    "sparse",
    "integers",
]
# The stream the transforms draw from is salted, so it never equals the reference's own draw for a seed.
_SALT = 0x5EED
SPARSE_ZERO_FRACTION = 0.9


class InputCase(BaseModel):
    """One extra input case the candidate and the reference must agree on."""

    name: str = Field(description="short identifier, e.g. 'ragged_k' (named in failures)")
    sizes: dict[str, int | str] = Field(
        default_factory=dict,
        description="overrides of the size dict, e.g. {'seq_len': 136}; may include 'dtype'",
    )
    base: str = Field(default="small", description="the SIZES entry the overrides are merged over")
    distribution: Distribution = Field(default="normal", description="how float input values are drawn")
    scale: float | None = Field(default=None, description="magnitude for the distribution, if it takes one")
    grow: int | None = Field(
        default=None,
        ge=2,
        le=8,
        description="multiply every dimension that scales between the reference's sizes by this factor "
        "(capped at its largest size): a size larger than `base`, e.g. to catch kernels right only when small",
    )

    def describe(self) -> str:
        parts = [self.distribution + (f" (scale {self.scale:g})" if self.scale is not None else "")]
        if self.grow:
            parts.append(f"{self.base} dims that scale x{self.grow}")
        if self.sizes:
            parts.append("sizes " + ", ".join(f"{k}={v}" for k, v in self.sizes.items()))
        return f"case {self.name!r}: " + "; ".join(parts)


def merged_size(sizes_table: dict[str, dict], case: InputCase) -> dict[str, Any]:
    """SIZES[case.base] with the case's overrides; unknown names and non-positive dims are unusable cases."""
    if case.base not in sizes_table:
        raise UnusableCaseError(
            f"{case.describe()} names base size {case.base!r}; the reference has {list(sizes_table)}"
        )
    base = dict(sizes_table[case.base])
    if case.grow:
        base = grown(sizes_table, case)
    unknown = sorted(k for k in case.sizes if k not in base and k != "dtype")
    if unknown:
        raise UnusableCaseError(
            f"{case.describe()} overrides unknown dimension(s) {unknown}; the size has {sorted(base)}"
        )
    for k, v in case.sizes.items():
        if k != "dtype" and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
            raise UnusableCaseError(
                f"{case.describe()}: dimension {k!r} must be a positive integer, got {v!r}"
            )
    return base | dict(case.sizes)


def grown(sizes_table: dict[str, dict], case: InputCase) -> dict[str, Any]:
    """SIZES[base] with every dimension that differs between the sizes multiplied (capped at the largest)."""
    base = dict(sizes_table[case.base])
    out, changed = dict(base), []
    for k, v in base.items():
        if not isinstance(v, int) or isinstance(v, bool):
            continue
        biggest = max((d.get(k, v) for d in sizes_table.values() if isinstance(d.get(k, v), int)), default=v)
        if biggest > v:
            out[k] = min(v * int(case.grow or 1), biggest)
            changed.append(k)
    if not changed:
        raise UnusableCaseError(
            f"{case.describe()}: no dimension of {case.base!r} scales between the reference's sizes {list(sizes_table)}"
        )
    return out


def _transform(x, key, case: InputCase):
    import jax
    import jax.numpy as jnp

    s = case.scale
    xf = x.astype(jnp.float32)
    d = case.distribution
    if d == "normal":
        y = xf if s is None else xf * s
    elif d == "uniform":
        bound = 1.0 if s is None else abs(s)
        y = jax.random.uniform(key, x.shape, jnp.float32, -bound, bound)
    elif d == "zeros":
        y = jnp.zeros_like(xf)
    elif d == "ones":
        y = jnp.ones_like(xf)
    elif d == "constant":
        y = jnp.full_like(xf, 0.5 if s is None else s)
    elif d == "large_magnitude":
        y = xf * (1e3 if s is None else s)
    elif d == "small_magnitude":
        y = xf * (1e-3 if s is None else s)
    elif d == "negative":
        y = -jnp.abs(xf) * (1.0 if s is None else abs(s))
    elif d == "mixed_sign":
        # |x| with independent random signs, magnitudes spread over two decades: cancellation in sums
        k1, k2 = jax.random.split(key)
        sign = jnp.where(jax.random.bernoulli(k1, 0.5, x.shape), 1.0, -1.0)
        spread = 10.0 ** jax.random.uniform(k2, x.shape, jnp.float32, -1.0, 1.0)
        y = sign * jnp.abs(xf) * spread * (1.0 if s is None else s)
    elif d == "sparse":
        keep = jax.random.uniform(key, x.shape) >= SPARSE_ZERO_FRACTION
        y = jnp.where(keep, xf * (1.0 if s is None else s), 0.0)
    elif d == "integers":
        y = jnp.round(xf * (1.0 if s is None else s))
    else:  # pragma: no cover - the Literal keeps this unreachable
        raise UsageError(f"unknown distribution {d!r}")
    return y.astype(x.dtype)


def transform_inputs(inputs: tuple, case: InputCase, seed: int | None) -> tuple:
    """Apply the case's distribution to every floating-point input (same seed -> same values)."""
    import jax
    import jax.numpy as jnp

    if case.distribution == "normal" and case.scale is None:
        return tuple(inputs)
    root = jax.random.fold_in(jax.random.key(_SALT), 0 if seed is None else seed)
    out = []
    for i, x in enumerate(inputs):
        if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating):
            out.append(_transform(jnp.asarray(x), jax.random.fold_in(root, i), case))
        else:
            out.append(x)
    return tuple(out)
