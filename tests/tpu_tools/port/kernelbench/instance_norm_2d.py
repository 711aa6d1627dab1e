"""Level 1 norm: instance normalization (per sample and channel statistics, no affine)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(channels)

    def forward(self, x):
        return self.inorm(x)


batch_size = 112
channels = 64
height = 512
width = 512


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
