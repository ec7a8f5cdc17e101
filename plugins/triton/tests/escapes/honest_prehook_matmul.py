"""Honest: split-K matmul with atomic adds into an output the autotune config's pre_hook lambda zeroes."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.autotune(
    configs=[triton.Config({"BM": 32, "BN": 32, "BK": 32, "SPLIT": 2}, pre_hook=lambda nargs: nargs["c_ptr"].zero_())],
    key=["M", "N", "K"],
)
@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(tl.program_id(2) * BK, K, BK * SPLIT):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.atomic_add(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def forward(self, A, B):
        A, B = A.contiguous(), B.contiguous()
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), dtype=A.dtype, device=A.device)
        mm_kernel[lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]), meta["SPLIT"])](
            A, B, C, M, N, K
        )
        return C
