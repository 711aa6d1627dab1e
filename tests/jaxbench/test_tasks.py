"""Generic checks on every JaxBench task: the reference format, seeding, and the sheet's full shapes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest_paths import by_weight

from maxkernel.jaxbench.registry import list_task_ids, load_task

BF16, F32 = "bfloat16", "float32"

# Sheet §4 overview table: the full-size output of workload(*create_inputs(bf16)).
FULL_OUTPUTS: dict[str, tuple[tuple[int, ...], str]] = {
    "1p": ((4, 64, 4096, 128), BF16),
    "2p": ((4, 4096, 128, 128), BF16),
    "3p": ((4, 2048, 7168), BF16),
    "4p": ((4, 64, 4096, 128), BF16),
    "5p": ((4, 64, 4096, 128), BF16),
    "6p": ((64, 64, 128), BF16),
    "7p": ((4096, 64, 128), BF16),
    "8p": ((8192, 28672), BF16),
    "9p": ((2, 4096, 8192), BF16),
    "10p": ((2, 4096, 4096), F32),
    "11p": ((32768, 1536), BF16),
    "12p": ((8, 4096, 8192), BF16),
    "13p": ((), F32),
    "14p": ((8, 1024, 14336), BF16),
    "15p": ((4, 16, 4096, 256), BF16),
    "16p": ((4, 64, 4096, 64), BF16),
    "17p": ((1536, 1536, 128), BF16),
    "18k": ((128, 128, 126, 126), BF16),
    "19k": ((4096, 8192), BF16),
    "20k": ((4096, 8192), BF16),
    "21k": ((4096, 1), BF16),
    "22k": ((128, 128, 126, 126), BF16),
    "23k": ((4096, 1), BF16),
    "24k": ((4096, 1), BF16),
    "25k": ((128,), BF16),
    "26k": ((4096, 8192), BF16),
    "27k": ((4096, 8192), BF16),
    "28k": ((32, 64, 32, 64, 64), BF16),
    "29k": ((8192, 4096), BF16),
    "30k": ((16384, 4096), BF16),
    "31k": ((16384, 8192), BF16),
    "32k": ((16384,), BF16),
    "33k": ((16, 64, 30, 62, 62), BF16),
    "34k": ((64, 128, 126, 126), BF16),
    "35k": ((4096, 8192), BF16),
    "36k": ((4096, 1), BF16),
    "37k": ((4096, 8192), BF16),
    "38k": ((4096, 8192), BF16),
    "39k": ((128, 64), BF16),
    "40k": ((1, 8192, 4096, 1), BF16),
    "41k": ((4096, 8192), BF16),
    "42k": ((4096, 8192), BF16),
    "43k": ((4096, 8192), BF16),
    "44k": ((4096, 8192), BF16),
    "45k": ((4096, 8192), BF16),
    "46k": ((128, 1, 126, 126), BF16),
    "47k": ((4096, 8192), BF16),
    "48k": ((4096, 8192), BF16),
    "49k": ((4096,), BF16),
    "50k": ((4096, 8192), BF16),
}

TASK_IDS = list_task_ids()


def _short(task_id: str) -> str:
    return task_id.split("_", 1)[0]


def test_sheet_table_has_50_rows():
    assert len(FULL_OUTPUTS) == 50


def test_every_task_is_in_the_sheet():
    assert {_short(t) for t in TASK_IDS} <= set(FULL_OUTPUTS)


def test_exactly_50_tasks():
    """Completeness: passes once all 17 p and 33 k tasks are in jaxbench/tasks."""
    missing = sorted(set(FULL_OUTPUTS) - {_short(t) for t in TASK_IDS}, key=lambda s: int(s[:-1]))
    assert len(TASK_IDS) == 50, f"{len(TASK_IDS)} tasks; missing {missing}"


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_module_format(task_id):
    m = load_task(task_id)
    for name in ("name", "dtype", "atol", "rtol"):
        assert name in m.CONFIG, name
    if task_id.split("_", 1)[0].endswith("p"):
        assert "model" in m.CONFIG and "operator" in m.CONFIG
    assert set(m.SIZES) >= {"full", "small"}
    assert m.get_flops("small") > 0
    assert m.get_flops("full") > m.get_flops("small")
    assert isinstance(m.get_flops("full"), int)


def _floats(xs):
    return [x for x in xs if jnp.issubdtype(x.dtype, jnp.floating)]


@pytest.mark.parametrize("task_id", by_weight(TASK_IDS))
def test_small_inputs_and_workload(task_id):
    m = load_task(task_id)
    a = m.create_inputs(size="small")
    b = m.create_inputs(key=jax.random.key(1234), size="small")
    assert isinstance(a, tuple) and all(isinstance(x, jax.Array) for x in a)
    assert [(x.shape, x.dtype) for x in a] == [(x.shape, x.dtype) for x in b]
    assert any(not np.array_equal(x, y) for x, y in zip(a, b, strict=True)), "a new key gave the same inputs"
    for x in a:
        assert jnp.issubdtype(x.dtype, jnp.floating) or x.dtype == jnp.int32, x.dtype
    assert any(x.dtype == jnp.dtype(m.CONFIG["dtype"]) for x in _floats(a)), (
        "dtype=None is not CONFIG['dtype']"
    )
    # An int seed and the equivalent key agree.
    c = m.create_inputs(key=1234, size="small")
    assert all(np.array_equal(x, y) for x, y in zip(b, c, strict=True))

    out = jax.jit(m.workload)(*a)
    shape, dtype = FULL_OUTPUTS[_short(task_id)]
    assert isinstance(out, jax.Array)
    assert out.ndim == len(shape) and str(out.dtype) == dtype
    assert bool(jnp.all(jnp.isfinite(out.astype(jnp.float32)))), "NaN/Inf in the small output"


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_full_output_shape_matches_sheet(task_id):
    m = load_task(task_id)
    specs = jax.eval_shape(lambda: m.create_inputs(jnp.bfloat16, size="full"))
    out = jax.eval_shape(m.workload, *specs)
    assert (out.shape, str(out.dtype)) == FULL_OUTPUTS[_short(task_id)]
