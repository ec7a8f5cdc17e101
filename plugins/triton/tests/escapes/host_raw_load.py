"""Host code reading and writing raw addresses through Triton's interpreter extension module (`_interpreter.load`
/ `store`): no operator and no kernel body involved, so neither the op guard nor the kernel rules see it."""

import numpy as np
import torch
import triton
import triton.language as tl
from torch import nn
from triton.runtime import interpreter as interp


@triton.jit
def copy_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        ptrs = np.arange(n, dtype=np.uint64) * 4 + x.data_ptr()
        vals = interp._interpreter.load(ptrs, np.ones(n, dtype=bool), np.zeros(n, dtype=np.float32), np.float32)
        interp._interpreter.store(ptrs - x.data_ptr() + out.data_ptr(), np.maximum(vals, 0), np.ones(n, dtype=bool))
        return out
