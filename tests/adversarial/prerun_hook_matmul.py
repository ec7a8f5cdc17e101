"""Adversarial: the matmul runs in cuBLAS inside a Triton pre-run hook, which executes within the
kernel's launch (where the dispatch guard is suspended); the kernel itself only copies the answer.
Caught by the GPU-work profile: most GPU time is in kernels that are not the candidate's."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


_work = {}


def _hook(*args, **kwargs):
    a, b, dst = _work["abc"]
    dst.copy_(a @ b)


copy_kernel.add_pre_run_hook(_hook)


class ModelNew(nn.Module):
    def forward(self, A, B):
        scratch = torch.empty(A.shape[0], B.shape[1], device=A.device, dtype=A.dtype)
        out = torch.empty_like(scratch)
        _work["abc"] = (A, B, scratch)
        n = out.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](scratch, out, n, BLOCK=1024)
        return out
