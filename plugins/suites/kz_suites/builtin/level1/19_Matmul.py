"""Square fp32 matrix multiplication C = A @ B."""

import torch
from torch import nn

N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    A = torch.randn(N, N)
    B = torch.randn(N, N) * N**-0.5
    return [A, B]


def get_init_inputs():
    return []


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"N": 72},
    "alt": {"N": 96},
}
