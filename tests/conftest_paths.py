"""Paths to the test kernels and references (imported by tests; not a pytest plugin)."""

from pathlib import Path

TESTS = Path(__file__).parent
KERNELS = TESTS / "kernels"
REFS = TESTS / "refs"
ROOT = TESTS.parent
MATMUL_REF = str(ROOT / "examples" / "matmul_reference.py")
PLUS_ONE_REF = str(REFS / "plus_one_reference.py")
TINY_REF = str(REFS / "tiny_reference.py")


def kernel(name: str) -> str:
    return str(KERNELS / f"{name}.py")


def scratch_outside_tmp(prefix: str):
    """A scratch dir for tests that run evaluations from it as cwd. Not under /tmp: the OS sandbox covers
    /tmp with a fresh tmpfs, and a job whose cwd lay two levels under /tmp died (SIGABRT) at the merge of
    the sandbox (reported to its owner); pytest's tmp_path lives there."""
    import tempfile

    base = Path.home() / ".cache" / "maxkernel-test-scratch"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


# Tasks whose small workload takes 20-50 s of XLA:CPU on the 2-core box (3-D and 2-D convolutions, the
# MoE and attention variants): their per-task checks run in `make test-slow`, the rest in `make test`.
HEAVY_ON_CPU = {
    "3p",
    "7p",
    "10p",
    "14p",
    "17p",
    "18k",
    "22k",
    "25k",
    "28k",
    "33k",
    "34k",
    "39k",
    "46k",
    "50k",
}


def by_weight(ids):
    """pytest params for task ids, the HEAVY_ON_CPU ones marked slow."""
    import pytest

    short = lambda t: str(t).split("_")[0]  # noqa: E731
    return [pytest.param(t, marks=pytest.mark.slow) if short(t) in HEAVY_ON_CPU else t for t in ids]
