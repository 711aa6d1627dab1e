"""A Triton kernel with its PyTorch launcher: out = x * w + b per row (w, b: a Model's parameters).

On CPU it runs in Triton's interpreter (TRITON_INTERPRET=1, which `maxkernel port` sets).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, x * w + b, mask=mask)


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
        self.b = nn.Parameter(torch.randn(n))

    def forward(self, x):
        out = torch.empty_like(x)
        rows, cols = x.shape
        scale_add_kernel[(rows,)](x, self.w, self.b, out, cols, BLOCK=triton.next_power_of_2(cols))
        return out


def get_inputs():
    return [torch.randn(16, 96)]


def get_init_inputs():
    return [96]
