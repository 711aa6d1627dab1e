"""Search spaces are for the production size, and their kernels compute the whole product at any size.

A search ranks at the target size, so a space written for 8p's small shape (blocks up to 256 x 896,
from 16 x 128) searched toys at M=8192, K=8192, N=28672: its best after 6 evaluations was 1.28 s against
XLA's ~4 ms. And `grid = (m // BM, ...)` dropped the rows past the last whole block at a non-multiple
size: the adversary here is exactly that kernel, which the partial-block case below must catch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from maxkernel.clients.search.templates import GEMM, RMSNORM, space_for


def _load(source: str):
    namespace: dict = {}
    exec(compile(source.replace("interpret=False", "interpret=True"), "<gemm>", "exec"), namespace)  # noqa: S102
    return namespace["workload"]


def test_the_spaces_start_at_production_blocks():
    assert (
        GEMM.initial["block_m"] >= 512 and GEMM.initial["block_n"] >= 1024 and GEMM.initial["block_k"] >= 512
    )
    assert RMSNORM.initial["block_rows"] >= 256
    assert set(GEMM.space["buffer_count"]) == {1, 2}  # this jax's Mosaic lowers no other buffer count


def test_the_gemm_kernel_computes_every_row_column_and_k_at_a_non_multiple_size():
    config = {**GEMM.initial, "block_m": 128, "block_n": 256, "block_k": 256}
    m, k, n = 200, 300, 260  # partial blocks on every axis, K's masked
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (m, k), jnp.float32).astype(jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.float32).astype(jnp.bfloat16)
    want = np.asarray(jnp.dot(a, b, preferred_element_type=jnp.float32).astype(jnp.bfloat16), np.float32)
    got = np.asarray(_load(GEMM.render(config))(a, b), np.float32)
    np.testing.assert_allclose(got, want, atol=0.1, rtol=0.02)
    # the old grid's kernel: rows past the last whole block are never written
    dropped = GEMM.render(config).replace("pl.cdiv(m, bm)", "m // bm")
    assert not np.allclose(np.asarray(_load(dropped)(a, b), np.float32), want, atol=0.1, rtol=0.02)


def test_a_task_with_a_program_template_searches_that_template():
    """19k's search space is the column-blocked matmul-with-epilogue template the Auto loop writes (0.75x
    XLA at full on v6e), not the whole-column operator template (0.03x)."""
    space = space_for("19k")
    assert space is not None and "block_cols" in space.initial
    assert "template=matmul" in space.render(space.initial)
