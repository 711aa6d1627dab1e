"""What a PyTorch source needs at one size, known before any tensor is allocated.

The source is built and run on torch's `meta` device (shapes and dtypes, no data): its inputs, its
parameters and buffers, its outputs, and every intermediate its forward makes, with the peak of those
alive at once (a tensor is freed when its last reference drops, as in the real run). FLOPs come from
torch's FlopCounterMode. From these, `check_bytes` and `check_seconds` estimate the port check: the
source and the port run side by side on copies of the same inputs.
"""

from __future__ import annotations

import weakref
from typing import Any

from pydantic import BaseModel, Field

# the check's host rates (estimate, a 2-core CPU): f32 FLOP/s of matmul and convolution, bytes/s of the rest
CPU_FLOPS = 2e10
CPU_BYTES = 1e9
BASE_BYTES = 1 << 30  # torch + jax + the compiled programs, before any tensor


class Footprint(BaseModel):
    """A source's tensors at one size (bytes), measured on the meta device: an estimate, nothing ran."""

    inputs: int = Field(description="get_inputs() tensors")
    params: int = Field(description="parameters and buffers")
    outputs: int
    peak: int = Field(description="the most bytes of intermediates (outputs included) alive at once")
    intermediates: int = Field(description="every op's output, summed (what recording each op holds)")
    flops: float = Field(description="matmul/convolution/attention FLOPs (torch's FlopCounterMode)")
    largest: int = Field(default=0, description="elements of the largest input or output")
    scalar_outputs: bool = Field(default=False, description="every output is one element (a loss)")

    def check_bytes(self) -> int:
        """The port check's peak (estimate): five copies of the inputs and parameters (the source's own,
        the port's draws, their host copies, the copies given to the source, the worst seed's kept for
        the report), the source's and the port's intermediates, both outputs."""
        boundary = self.inputs + self.params
        return BASE_BYTES + 5 * boundary + 2 * self.peak + 2 * self.outputs

    def locate_bytes(self) -> int:
        """The check with both sides' every intermediate held (the op-by-op comparison of a port this tool
        wrote): what a scalar output needs, since a constant can pass the scalar alone."""
        return self.check_bytes() + 2 * self.intermediates

    def seconds(self) -> float:
        """One forward on this host (estimate)."""
        return self.flops / CPU_FLOPS + (self.inputs + self.params + self.intermediates) / CPU_BYTES

    def check_seconds(self, runs: int) -> float:
        """`runs` runs of source and port (the port's draws and copies cost about one more forward)."""
        return runs * 3 * self.seconds()


class MetaFailure(Exception):
    """The source cannot be built or run on the meta device (data-dependent code): no estimate."""


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size()


def measure(build: Any) -> Footprint:
    """The footprint of `build()` -> (model, inputs), both made under torch.device('meta')."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.device("meta"):
            model, inputs = build()
    except Exception as e:
        raise MetaFailure(f"building on the meta device: {type(e).__name__}: {_first(e)}") from None
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    state = list(model.parameters()) + list(model.buffers())
    if any(not t.is_meta for t in tensors + state):
        raise MetaFailure("the source makes tensors off the meta device (an explicit device=)")
    live, peak, total = [0], [0], [0]

    def freed(n: int) -> None:
        live[0] -= n

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            seen = {id(a) for a in args if isinstance(a, torch.Tensor)}
            for t in out if isinstance(out, tuple | list) else [out]:
                if isinstance(t, torch.Tensor) and t._base is None and id(t) not in seen:
                    n = _nbytes(t)
                    live[0] += n
                    total[0] += n
                    peak[0] = max(peak[0], live[0])
                    weakref.finalize(t, freed, n)
            return out

    flops = FlopCounterMode(display=False)
    try:
        with torch.no_grad(), torch.device("meta"), flops, Recorder():  # tensors the forward makes, too
            out = model(*inputs)
    except Exception as e:
        raise MetaFailure(
            f"running the forward on the meta device: {type(e).__name__}: {_first(e)}"
        ) from None
    outs = [t for t in (out if isinstance(out, tuple | list) else [out]) if isinstance(t, torch.Tensor)]
    return Footprint(
        inputs=sum(_nbytes(t) for t in tensors),
        params=sum(_nbytes(t) for t in state),
        outputs=sum(_nbytes(t) for t in outs),
        peak=max(peak[0], sum(_nbytes(t) for t in outs)),
        intermediates=total[0],
        flops=float(flops.get_total_flops()),
        largest=max((t.numel() for t in tensors + outs), default=0),
        scalar_outputs=bool(outs) and all(t.numel() <= 1 for t in outs),
    )


def _first(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:200]
