"""Level 1 norm: group normalization of a 4-D activation into a fixed number of groups."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, num_groups):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, channels)

    def forward(self, x):
        return self.gn(x)


batch_size = 112
channels = 64
num_groups = 8
height = 512
width = 512


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, num_groups]
