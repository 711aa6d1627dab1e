"""Level 2: a 3x3 convolution, a group norm over 4 groups, then SiLU."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size=3, padding=1)
        self.norm = nn.GroupNorm(groups, cout)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(8, 16, 24, 24)]


def get_init_inputs():
    return [16, 32, 4]
