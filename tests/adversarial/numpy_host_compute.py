"""Matmul done by NumPy on the host (`.numpy()`, `np.matmul`), handed back with `new_tensor`; a Triton kernel
only copies the host's answer into the output. No aten operator computes, so only the static check's host-escape
rule (or, past it, the guard's `Tensor.numpy` record) sees it (19_Matmul)."""

import numpy as np
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, A, B):
        host = A.new_tensor(np.matmul(A.numpy(), B.numpy()))
        out = torch.empty_like(host)
        copy_kernel[(triton.cdiv(out.numel(), 1024),)](host, out, out.numel(), BLOCK=1024)
        return out
