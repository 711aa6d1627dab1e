"""Level 1: a batched matmul, scaled and clamped."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale, bound):
        super().__init__()
        self.scale, self.bound = scale, bound

    def forward(self, a, b):
        return torch.clamp(torch.bmm(a, b) * self.scale, -self.bound, self.bound)


def get_inputs():
    return [torch.randn(16, 128, 64), torch.randn(16, 64, 96)]


def get_init_inputs():
    return [0.125, 1.5]
