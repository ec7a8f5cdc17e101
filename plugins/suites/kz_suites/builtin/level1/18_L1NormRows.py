"""L1 row normalization x / sum(|x|, dim=1) of many short rows (width 16 keeps outputs O(0.1))."""

import torch
from torch import nn

batch_size = 16777216
dim = 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / torch.sum(torch.abs(x), dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 250, "dim": 12},
    "alt": {"batch_size": 304, "dim": 16},
}
