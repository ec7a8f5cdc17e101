"""The Triton language's prompt sections: its rules and a one-shot example (KernelBench's elementwise add)."""

from kzcore import one_shot

RULES = """Write the kernels in Triton (`import triton`, `import triton.language as tl`, `@triton.jit`).
- `ModelNew.forward` may only allocate outputs (`torch.empty`, `torch.empty_like`, `torch.zeros`, `new_empty`),
  take views and shapes (`view`, `reshape`, `contiguous`, `permute`, `transpose`, `size`, `stride`, `shape`,
  `numel`) and launch your `@triton.jit` kernels with `kernel[grid](...)`.
- No PyTorch compute in forward: no `torch.*` math, no `torch.nn.functional`, no tensor methods such as
  `.sum()` or `.softmax()`, no `@`, no calls to `nn` submodules, no try/except fallbacks, no `.numpy()` or
  `.tolist()` (the work is done by your kernels, not on the host).
- Inside a `@triton.jit` kernel use only `tl.*` (and your other `@triton.jit` kernels): no `torch`, no Python
  helpers.
- Create the same parameters as `Model`, in the same order (e.g. keep `self.linear = nn.Linear(...)` and pass
  `self.linear.weight` to your kernel). Inputs are read-only. Mask every load and store."""

EXAMPLE = one_shot(
    """```python
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a + b, mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
        return out
```"""
)
