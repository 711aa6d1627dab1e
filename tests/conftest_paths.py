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
