"""Linear layer, row max, distance of every element to its row max, then exact GELU."""

import torch
import torch.nn.functional as F
from torch import nn

batch_size = 16384
in_features = 4096
out_features = 2048


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.gemm(x)
        row_max = torch.max(x, dim=1, keepdim=True).values
        x = row_max - x
        return F.gelu(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 33, "in_features": 48, "out_features": 40},
    "alt": {"batch_size": 48, "in_features": 64, "out_features": 48},
}
