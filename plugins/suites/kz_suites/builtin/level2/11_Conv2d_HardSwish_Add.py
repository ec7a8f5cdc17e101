"""Conv2d 3x3 (padding 1), HardSwish, then add a second input of the output's shape."""

import torch
import torch.nn.functional as F
from torch import nn

batch_size = 32
in_channels = 32
out_channels = 128
height = 128
width = 128
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x, add_input):
        x = self.conv(x)
        x = F.hardswish(x)
        return x + add_input


def get_inputs():
    return [
        4.0 * torch.randn(batch_size, in_channels, height, width),
        torch.randn(batch_size, out_channels, height, width),
    ]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 10, "width": 10},
    "alt": {"batch_size": 16, "in_channels": 16, "out_channels": 16, "height": 16, "width": 16},
}
