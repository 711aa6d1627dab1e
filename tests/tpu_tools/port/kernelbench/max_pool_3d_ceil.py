"""Level 1 pooling: 3-D max pooling, dilated, rounding the output size up (ceil_mode)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding, dilation):
        super().__init__()
        self.pool = nn.MaxPool3d(
            kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=True
        )

    def forward(self, x):
        return self.pool(x)


batch_size = 16
channels = 32
depth = 129
height = 130
width = 257
kernel_size = 3
stride = 2
padding = 1
dilation = 3


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding, dilation]
