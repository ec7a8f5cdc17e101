"""Conv2d 3x3 (no padding), minimum over channels (keepdim), then tanh."""

import torch
from torch import nn

batch_size = 64
in_channels = 64
out_channels = 128
height = 64
width = 64
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        x = self.conv(x)
        x = torch.min(x, dim=1, keepdim=True)[0]
        return torch.tanh(x)


def get_inputs():
    return [0.5 * torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 10, "width": 10},
    "alt": {"batch_size": 16, "in_channels": 16, "out_channels": 16, "height": 16, "width": 16},
}
