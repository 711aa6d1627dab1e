"""Level 1 convolution: 2-D depthwise (one filter per channel, groups = channels), padded."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, kernel_size, padding):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=padding, groups=channels, bias=False)

    def forward(self, x):
        return self.conv(x)


batch_size = 32
channels = 128
height = 512
width = 512
kernel_size = 3
padding = 1


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size, padding]
