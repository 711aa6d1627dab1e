"""Level 3: the intra-chunk part of a state-space-duality scan (Mamba-2 style): decays from a segment sum
with boolean masks (`~mask`), then applied to the inputs of each chunk."""

import torch
import torch.nn as nn


def segment_sum(a):
    """out[..., i, j] = sum(a[..., j+1 : i+1]) below the diagonal, 0 on it, -inf above."""
    n = a.size(-1)
    grid = a.unsqueeze(-1).expand(*a.shape, n)
    strict = torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1)
    grid = grid.masked_fill(~strict, 0)
    sums = torch.cumsum(grid, dim=-2)
    keep = torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=0)
    return sums.masked_fill(~keep, -torch.inf)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, decay, x):
        weights = torch.exp(segment_sum(decay))
        return torch.einsum("bhcls,bcshd->bclhd", weights, x)


batch_size = 16
chunks = 32
chunk_len = 64
heads = 8
head_size = 64


def get_inputs():
    decay = -torch.rand(batch_size, heads, chunks, chunk_len)
    return [decay, torch.randn(batch_size, chunks, chunk_len, heads, head_size)]


def get_init_inputs():
    return []
