"""The k-tiled matmul template's first blocks at the production size, by its cost.

Its cost now counts the f32 accumulator's load and store on every k step (the LLO of 8p: 2048 bundles
a step at 1024 x 2048 tiles, beside the MXU's), and its VMEM count is the compiler's, not a 2x bound:
8p took 512-deep k blocks (0.94x its expert) and 50k 256-row blocks with 128-deep k (0.81x).
"""

from __future__ import annotations

import re

import pytest

from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.problem.program import describe


def blocks(task: str) -> dict[str, str]:
    source = first_kernel(describe(task).model_dump(mode="json"), get_chip("tpu-v6e"))
    assert "template=matmul" in source
    return dict(re.findall(r"^(BLOCK_\w+) = (\S+)$", source, re.M))


@pytest.mark.parametrize(
    ("task", "want"),
    [
        # [8192, 8192] @ [8192, 28672]: 1024 x 2048 tiles, 4 k steps (40 MiB: blocks + accumulator)
        ("8p_GEMM", {"BLOCK_ROWS": "1024", "BLOCK_COLS": "2048", "BLOCK_K": "2048"}),
        # softmax over whole rows of 8192: 512 rows (the weight streams 8 times, not 16), 40.5 MiB
        # by the count, 40.6 in `maxkernel analyze`; 512 x 512 (49 MiB) is over the first rule. N tiled
        # (matmul_rows, a second pass over y after the kernel) estimates 858 us against this one's 774
        ("50k_Matmul_GELU_Softmax", {"BLOCK_ROWS": "512", "BLOCK_COLS": "None", "BLOCK_K": "256"}),
    ],
)
def test_first_blocks_at_full(task, want):
    assert blocks(task) == want
