"""Honest (1_ReLU): in-kernel tl.make_tensor_descriptor loads/stores (blocks overhang both edges: the
descriptor's bounds check pads/masks them; make_block_ptr is gone in Triton 3.9), the output a strided view at a
storage offset inside a larger buffer."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def relu_desc_kernel(x_ptr, y_ptr, M, N, sxm, sym, BM: tl.constexpr, BN: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[sxm, 1], block_shape=[BM, BN])
    yd = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[sym, 1], block_shape=[BM, BN])
    v = tl.load_tensor_descriptor(xd, [pm * BM, pn * BN])
    tl.store_tensor_descriptor(yd, [pm * BM, pn * BN], tl.maximum(v, 0.0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        M, N = x.shape
        big = torch.empty(M + 2, N + 24, dtype=x.dtype, device=x.device)
        y = big[1 : M + 1, 4 : N + 4]  # storage offset, row stride N + 24 (16-byte aligned)
        BM, BN = 16, 64
        relu_desc_kernel[(triton.cdiv(M, BM), triton.cdiv(N, BN))](x, y, M, N, x.stride(0), y.stride(0), BM=BM, BN=BN)
        return y
