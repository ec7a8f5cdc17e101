"""Cheat: nn.Linear as one Triton kernel with fp32 (IEEE) tile products in its correctness trials and bf16 ones
once it sees it is timed, a new allocation not NaN-filled (23_Linear). Its timed outputs stay inside atol = rtol =
1e-2, so the output checks pass them; the precision policy on the timed pairs' spot values finds a bf16-class error there, where
the trials measured fp32."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def linear_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk,
    LOW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + kk[None, :] * stride_xk,
            mask=(offs_m[:, None] < M) & (kk[None, :] < K),
            other=0.0,
        )
        w = tl.load(
            w_ptr + kk[:, None] * stride_wk + offs_n[None, :] * stride_wn,
            mask=(kk[:, None] < K) & (offs_n[None, :] < N),
            other=0.0,
        )
        if LOW:
            acc += tl.dot(x.to(tl.bfloat16), w.to(tl.bfloat16))
        else:
            acc += tl.dot(x, w, input_precision="ieee")
    acc += tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0)[None, :]
    tl.store(out_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


PROBE = 262151  # elements of an allocation of its own size class, read to tell a trial from a timed call


def _being_timed(like) -> bool:
    """The op guard fills a fresh allocation with NaN in the trials (and the free cache is NaN-filled there), not
    in the timed calls: a number in a new allocation means a timer. The probe is zeroed after the read, so the
    same block comes back zeroed, not with a trial's NaN."""
    probe = torch.empty(PROBE, device=like.device)
    value = probe[0].item()
    probe.zero_()
    return value == value


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        w, b = self.linear.weight, self.linear.bias
        M, K = x.shape
        N = w.shape[0]
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        linear_kernel[grid](
            x, w, b, out, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
            LOW=_being_timed(x), BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,
        )  # fmt: skip
        return out
