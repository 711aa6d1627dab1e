"""Level 1 transposed convolution: 3-D, grouped and dilated."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, groups, dilation):
        super().__init__()
        self.deconv = nn.ConvTranspose3d(
            in_channels, out_channels, kernel_size, groups=groups, dilation=dilation
        )

    def forward(self, x):
        return self.deconv(x)


batch_size = 16
in_channels = 32
out_channels = 64
depth = 32
height = 64
width = 64
kernel_size = 3
groups = 2
dilation = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups, dilation]
