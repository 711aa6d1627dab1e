"""Level 1 transposed convolution: 1-D, strided and dilated, no bias."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, dilation):
        super().__init__()
        self.deconv = nn.ConvTranspose1d(
            in_channels, out_channels, kernel_size, stride=stride, dilation=dilation, bias=False
        )

    def forward(self, x):
        return self.deconv(x)


batch_size = 32
in_channels = 64
out_channels = 32
length = 131072
kernel_size = 5
stride = 2
dilation = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, dilation]
