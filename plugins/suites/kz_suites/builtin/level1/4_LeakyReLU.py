"""LeakyReLU with a constructor-supplied negative slope over a large 2-D tensor."""

import torch
import torch.nn.functional as F
from torch import nn

batch_size = 32768
dim = 8192
negative_slope = 0.2


class Model(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, negative_slope=self.negative_slope)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [negative_slope]


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 16, "dim": 250},
    "alt": {"batch_size": 32, "dim": 336},
}
