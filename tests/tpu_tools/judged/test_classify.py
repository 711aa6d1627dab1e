"""Real-world failures worded at their root: VMEM numbers and the limit to raise, a removed jax API, and
(in the judge) the caller's spelling of an option and the NaN an uninitialised buffer shows in interpret mode."""

from __future__ import annotations

import pytest
from conftest_paths import KERNELS, REFS

from maxkernel.tpu_tools.judged.classify import classify_exception

# The TPU compiler's own words for a scoped-VMEM overshoot (libtpu, compile-only v6e).
SCOPED = (
    "RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom: ... Scoped allocation with size 40.00M and limit "
    "32.00M exceeded scoped vmem limit by 8.00M."
)
MIB = 1 << 20


def test_scoped_vmem_overshoot_keeps_the_compilers_numbers_and_names_the_limit_to_raise():
    f = classify_exception(RuntimeError(SCOPED), "compile", physical_vmem_bytes=128 * MIB)
    assert f.kind == "vmem_exhausted"
    assert (f.requested_bytes, f.capacity_bytes) == (40 * MIB, 32 * MIB)
    assert "vmem_limit_bytes=" in f.summary and "128 MiB physical" in f.summary
    limit = int(f.summary.split("vmem_limit_bytes=")[1].split(")")[0])
    assert 40 * MIB < limit <= 128 * MIB
    # where the chip itself has too little, raising the limit is no fix: only smaller blocks are offered
    small = classify_exception(RuntimeError(SCOPED), "compile", physical_vmem_bytes=32 * MIB)
    assert "vmem_limit_bytes" not in small.summary and "smaller blocks" in small.summary


def test_a_removed_pallas_api_is_named_with_the_installed_jax():
    exc = AttributeError("module 'jax.experimental.pallas.tpu' has no attribute 'repeat'")
    f = classify_exception(exc, "trace")
    assert f.kind == "python_error" and "jax.experimental.pallas.tpu.repeat does not exist" in f.summary
    assert "installed jax" in f.summary and "removed or renamed" in f.summary


@pytest.mark.slow  # one real compile (~10 s)
def test_the_real_compilers_vmem_verdict_carries_its_numbers():
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.pool.workers import WorkerPool

    with WorkerPool(max_workers=1) as pool:
        r = Evaluator(pool, timeout_s=240).compile(
            str(KERNELS / "vmem" / "scoped_overshoot.py"), str(REFS / "copy_plus_one_20mib_reference.py")
        )
    assert r.failure is not None and r.failure.kind == "vmem_exhausted", r.failure
    assert (r.failure.requested_bytes, r.failure.capacity_bytes) == (40 * MIB, 32 * MIB)
    assert "vmem_limit_bytes=" in r.failure.summary


def test_a_mosaic_verification_error_is_the_kernels_lowering_error_at_its_line():
    """A real sample: lowering a float iota for TPU fails Mosaic's verifier (jax words it 'please file a
    bug'); the verdict blames the kernel's op at its line."""
    import importlib.util

    import jax
    import jax.numpy as jnp

    path = KERNELS / "corpus" / "broken_float_iota.py"
    spec = importlib.util.spec_from_file_location("broken_float_iota", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = jax.ShapeDtypeStruct((16, 128), jnp.float32)
    with pytest.raises(Exception) as info:
        jax.jit(mod.workload).trace(x).lower(lowering_platforms=("tpu",))
    f = classify_exception(info.value, "compile", path.resolve())
    assert f.kind == "lowering_error", f
    assert "file a bug" not in f.summary and "'tpu.iota' op result #0 must be vector of integer" in f.summary
    assert f.line == 10 and "candidate line 10" in f.summary  # the broadcasted_iota line
