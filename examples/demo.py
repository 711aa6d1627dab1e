"""`make demo`: compile the example Pallas matmul for tpu-v6e with the real TPU compiler, then validate it.

(When the orchestrator is installed this demo runs the offline Auto loop instead; see README.)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent


def main() -> int:
    from maxkernel.tpu_tools.evaluate import Evaluator
    from maxkernel.tpu_tools.render import console, render_compile, render_validation

    kernel = str(HERE / "matmul_kernel.py")
    reference = str(HERE / "matmul_reference.py")
    evaluator = Evaluator()
    console.rule("maxkernel compile --target tpu-v6e")
    compiled = evaluator.compile(kernel, reference, "tpu-v6e", "small")
    render_compile(compiled)
    console.rule("maxkernel validate --target tpu-v6e")
    validated = evaluator.validate(kernel, reference, "tpu-v6e", "small")
    render_validation(validated)
    return 0 if compiled.ok and validated.ok else 1


if __name__ == "__main__":
    sys.exit(main())
