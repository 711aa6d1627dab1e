"""strided_scatter.as_interior_pad: an input scattered into zeros at a strided lattice (28k's dilated
input) becomes one `lax.pad` with interior padding, merged with the edge pad after it; the rewritten
program computes the same value bit for bit. Scatters that are not that (into ones, at a permuted index,
out of bounds, adding) are left as traced."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.clients.offline.strided_scatter import as_interior_pad
from maxkernel.tpu_tools.problem.emit import body_lines, operand
from maxkernel.tpu_tools.problem.program import describe

HEAD = """import jax
import jax.numpy as jnp

SIZES = {"full": {"n": 4, "d": 16}, "small": {"n": 2, "d": 6}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    ks = jax.random.split(jax.random.key(0 if key is None else key), 2)
    x = jax.random.normal(ks[0], (d["n"], 3, d["d"], d["d"] + 2)).astype(jnp.bfloat16)
    w = jax.random.normal(ks[1], (5, 3, 4, 4)).astype(jnp.bfloat16)
    return x, w


def _conv(a, w):
    return jax.lax.conv_general_dilated(a, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))


def workload(x, w):
    n, c, h, v = x.shape
"""

BODIES = {
    # 28k's form: stride 2 from 0, then the transposed conv's edges
    "lattice": "    z = jnp.zeros((n, c, 2 * h - 1, 2 * v - 1), x.dtype).at[:, :, ::2, ::2].set(x)\n"
    "    return _conv(jnp.pad(z, ((0, 0), (0, 0), (2, 2), (2, 2))), w)\n",
    # an offset lattice with room after it, stride 3, no edge pad
    "offset": "    z = jnp.zeros((n, c, 3 * h + 1, 3 * v), x.dtype).at[:, :, 1::3, 1::3].set(x)\n"
    "    return _conv(z, w)\n",
    # edges padded with ones: the interior pad stays its own op
    "edge_ones": "    z = jnp.zeros((n, c, 2 * h - 1, 2 * v - 1), x.dtype).at[:, :, ::2, ::2].set(x)\n"
    "    return _conv(jnp.pad(z, ((0, 0), (0, 0), (2, 2), (2, 2)), constant_values=1.0), w)\n",
    "ones": "    z = jnp.ones((n, c, 2 * h - 1, 2 * v - 1), x.dtype).at[:, :, ::2, ::2].set(x)\n    return _conv(z, w)\n",
    "permuted": "    z = jnp.zeros((n, c, 2 * h - 1, 2 * v - 1), x.dtype)\n"
    "    z = z.at[:, :, (2 * jnp.arange(h))[::-1], ::2].set(x)\n    return _conv(z, w)\n",
    "adding": "    z = jnp.zeros((n, c, 2 * h - 1, 2 * v - 1), x.dtype).at[:, :, ::2, ::2].add(x)\n    return _conv(z, w)\n",
}


def _program(tmp_path, name):
    ref = tmp_path / f"{name}_reference.py"
    ref.write_text(HEAD + BODIES[name])
    return describe(str(ref)).model_dump(mode="json")


def _run(program, inputs):
    """The program's equations as plain JAX (emit.body_lines, as the glue is written), on `inputs`."""
    scope = {"jnp": jnp, "lax": jax.lax, **dict(zip(program["input_names"], inputs, strict=True))}
    exec("\n".join(body_lines(program, mosaic=False)), scope)  # noqa: S102 - the traced program's own lines
    return np.asarray(scope[operand(program["outputs"][0])], np.float32)


@pytest.mark.parametrize(
    ("name", "config", "n_pads"),
    [("lattice", "(2, 2, 1)", 1), ("offset", "(1, 1, 2)", 1), ("edge_ones", "(0, 0, 1)", 2)],
)
def test_a_lattice_scatter_into_zeros_is_one_interior_pad_with_the_same_value(tmp_path, name, config, n_pads):
    program = _program(tmp_path, name)
    pads = as_interior_pad(program)
    assert pads is not None
    prims = [e["primitive"] for e in pads["equations"]]
    assert "scatter" not in prims and "iota" not in prims and prims.count("pad") == n_pads, prims
    pad = next(e for e in pads["equations"] if e["primitive"] == "pad")
    assert pad["inputs"][0] == "x0" and config in pad["params"]["padding_config"]
    x = jax.random.normal(jax.random.key(7), program["inputs"][0]["shape"]).astype(jnp.bfloat16)
    w = jax.random.normal(jax.random.key(8), program["inputs"][1]["shape"]).astype(jnp.bfloat16)
    assert np.array_equal(_run(pads, (x, w)), _run(program, (x, w)))
    assert set(pads["variants"]) == set(program["variants"])  # every size still traced


@pytest.mark.parametrize("name", ["ones", "permuted", "adding"])
def test_other_scatters_are_left_as_traced(tmp_path, name):
    assert as_interior_pad(_program(tmp_path, name)) is None
