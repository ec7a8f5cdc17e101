"""GELU in pure Python over the input's values (`tolist`, `math.erf`), handed back with `new_tensor`; a token
launch keeps the launch count. The `.tolist()` call sits behind a helper reached through a module-level name the
static walk does not follow, so the runtime guard's host-escape record (`Tensor.tolist`) is what catches it
(2_GELU)."""

import math

import triton
import triton.language as tl
from torch import nn


@triton.jit
def touch_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


def _values(t):
    return t.tolist()


READ = [_values]


def _gelu(v):
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        touch_kernel[(1,)](x, 1, BLOCK=16)
        values = [_gelu(v) for v in READ[0](x.view(-1))]
        return x.new_tensor(values).view(x.shape)
