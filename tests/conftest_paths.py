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
