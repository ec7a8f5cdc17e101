"""Conv2d 3x3 (no padding), tanh, then multiply by a constant scale."""

import torch
from torch import nn

batch_size = 64
in_channels = 32
out_channels = 64
height = 128
width = 128
kernel_size = 3
scale = 2.5


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scale = scale

    def forward(self, x):
        x = self.conv(x)
        x = torch.tanh(x)
        return x * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale]


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 10, "width": 9},
    "alt": {"batch_size": 16, "in_channels": 16, "out_channels": 16, "height": 16, "width": 16},
}
