"""No nn.Module here: `maxkernel port` must say so in one line."""

import torch


def get_inputs():
    return [torch.randn(4, 4)]
