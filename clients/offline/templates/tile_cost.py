"""The rough per-tile costs the templates' cost functions share (v6e-like): they only order proposals,
the compiler's LLO schedule is what the estimate reads. Each rule names the LLO it was read from."""

from __future__ import annotations

from maxkernel.tpu_tools.problem.emit import dot_time_factor

CLOCK_HZ = 1.75e9  # v6e's TensorCore clock
VREG_BYTES = 4096  # one [8, 128] f32 vreg


def flops_us(m: int, k: int, n: int, rows: int, cols: int, kind: str) -> float:
    """A rough MXU time of an [m, k] @ [k, n] dot in [rows, cols] output tiles (900 TFLOP/s): a pass
    wants 256 rows and columns of work, a smaller tile leaves the array part idle."""
    feed = min(rows, 256) / 256 * min(cols, 256) / 256
    return 2 * m * k * n / (900e12 * feed) * 1e6 * dot_time_factor(kind)


def branch_us(elements: int, ops: int) -> float:
    """A rough time of elementwise work under a kernel's `pl.when` (an epilogue on the last step): it
    does not overlap the MXU's. About half a bundle per op per 1024 elements (9p's LLO: 3026 bundles
    for SwiGLU's 6 ops, the casts and the store included, on a 1024 x 1024 block)."""
    return 0.5 * ops * elements / 1024 / CLOCK_HZ * 1e6


# Bundles the f32 accumulator's load, add and store take per [8, 128] vreg on a k step, issued beside the
# MXU's pushes: 35k's LLO at 1024 x 2048 tiles (2048 vregs) has 16616 bundles a middle k step at bk 2048
# against the MXU's 16384, 16596 at 2048 x 1024; the k step of the kernel before 0a8848c, 4456 at bk 512
# against 4096 (2048 a step, one vreg store a bundle, had been read off an older 8p schedule).
ACC_BUNDLES_PER_VREG = 0.125


def accumulator_us(steps: int, rows: int, cols: int) -> float:
    """The f32 accumulator's load and store on every k step: mostly hidden under a large tile's MXU work,
    about a bundle per 8 vregs beside it (ACC_BUNDLES_PER_VREG). Counted as one vreg store a bundle it made
    the smaller k blocks and the narrower tiles that stream the operands more often look cheaper: 31k's
    first kernel took 1024 x 1024 tiles, reading x 8 times and the weight 16 times (memory-bound)."""
    return steps * rows * cols * 4 / VREG_BYTES * ACC_BUNDLES_PER_VREG / CLOCK_HZ * 1e6
