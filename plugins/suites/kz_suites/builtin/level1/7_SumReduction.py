"""Sum over dim 1 of a 3-D tensor, keeping the reduced dimension."""

import torch
from torch import nn

batch_size = 128
dim1 = 4096
dim2 = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=1, keepdim=True)


def get_inputs():
    # Scaled so the sums are O(1) whatever dim1 is.
    return [torch.randn(batch_size, dim1, dim2) * dim1**-0.5]


def get_init_inputs():
    return []


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 4, "dim1": 33, "dim2": 250},
    "alt": {"batch_size": 16, "dim1": 48, "dim2": 160},
}
