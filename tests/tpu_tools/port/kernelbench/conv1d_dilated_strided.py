"""Level 1 convolution: 1-D, strided and dilated, with a bias."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, dilation):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride, dilation=dilation)

    def forward(self, x):
        return self.conv(x)


batch_size = 64
in_channels = 64
out_channels = 128
length = 524288
kernel_size = 3
stride = 3
dilation = 4


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, dilation]
