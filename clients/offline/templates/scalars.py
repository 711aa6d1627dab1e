"""Scalar (0-d) inputs as scalars: a step count, a temperature, a length reach a kernel through SMEM.

A rank-0 array has no VMEM block form (Mosaic refuses a () block: it breaks the (8, 128) tiling rule), and
a traced value must stay an input: a kernel that closed over one seed's step or temperature would be right
for that seed only. So a template passes each 0-d input to `pallas_call` as a (1,)-shaped array in SMEM
(`pl.BlockSpec(memory_space=pltpu.SMEM)`, the whole array at every grid step) and its body reads it as
`ref[0]`: a 0-d value that the reference's own equations use as traced. SMEM holds 32-bit words, so a
narrower scalar (bf16, int8, bool) travels widened, exactly, and is narrowed back on load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SMEM_SPEC = "pl.BlockSpec(memory_space=pltpu.SMEM)"
# the 32-bit word a narrower scalar travels as (every value of the narrow dtype is exact in it)
_CARRIER = {
    "bfloat16": "float32",
    "float16": "float32",
    "int8": "int32",
    "int16": "int32",
    "uint8": "int32",
    "uint16": "int32",
    "bool": "int32",
}
_WORD = {"float32", "int32", "uint32"}


def is_scalar(spec: Mapping[str, Any]) -> bool:
    """Whether an input spec ({"shape", "dtype"}) is a 0-d array."""
    return not spec["shape"]


def check(spec: Mapping[str, Any]) -> None:
    """ValueError (the template's "cannot do these inputs") for a scalar SMEM cannot carry: 64-bit ones."""
    if spec["dtype"] not in _WORD and spec["dtype"] not in _CARRIER:
        raise ValueError(f"a {spec['dtype']} scalar input has no 32-bit SMEM word to travel in")


def arg(name: str, spec: Mapping[str, Any]) -> str:
    """The source of what `pallas_call` is given for scalar input `name`: its (1,) reshape, widened to a
    32-bit word where it is narrower (a convert and a reshape: layout, no work outside the kernel)."""
    check(spec)
    carrier = _CARRIER.get(spec["dtype"])
    return f"{name}.reshape(1)" + (f".astype(jnp.{carrier})" if carrier else "")


def load(ref: str, spec: Mapping[str, Any]) -> str:
    """The source that reads scalar input `ref` in the body: its one SMEM word as a 0-d value of its dtype."""
    dtype = spec["dtype"]
    if dtype == "bool":
        return f"({ref}[0] != 0)"
    return f"{ref}[0]" + (f".astype(jnp.{dtype})" if dtype in _CARRIER else "")


def map_comment(name: str, spec: Mapping[str, Any]) -> str:
    """The one-line comment beside a scalar input's spec."""
    carrier = _CARRIER.get(spec["dtype"])
    word = f", widened to {carrier}" if carrier else ""
    return f"    # {name} is a scalar ({spec['dtype']}[]): one SMEM word{word}, read as {name}_ref[0]\n"


def _spec_of(program: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    return program["inputs"][list(program["input_names"]).index(name)]


def load_input(program: Mapping[str, Any], name: str) -> str:
    """How a template's body reads program input `name` from its ref `<name>_ref`: a block as it lies,
    a scalar as its SMEM word."""
    spec = _spec_of(program, name)
    return load(f"{name}_ref", spec) if is_scalar(spec) else f"{name}_ref[...]"


def call_arg(program: Mapping[str, Any], name: str) -> str:
    """What a template hands `pallas_call` for program input `name`: the array, or a scalar's (1,) word."""
    spec = _spec_of(program, name)
    return arg(name, spec) if is_scalar(spec) else name
