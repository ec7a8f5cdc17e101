"""Honest (1_ReLU): a module-level constant table (0.0, 1.0) passed as a tensor argument, the result
accumulated into a zeroed output with tl.atomic_add (one contribution per element), reading the input through
a view with a storage offset (x.view(-1)[1:] plus the first element separately)."""

import torch
import triton
import triton.language as tl
from torch import nn

GATE = torch.tensor([0.0, 1.0], dtype=torch.float32)


@triton.jit
def relu_atomic_kernel(x_ptr, out_ptr, gate_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    g = tl.load(gate_ptr + (x > 0).to(tl.int32), mask=mask, other=0.0)
    tl.atomic_add(out_ptr + offs, x * g, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.gates = {}

    def forward(self, x):
        gate = self.gates.get(x.device)
        if gate is None:
            gate = GATE.to(x.device)
            self.gates[x.device] = gate
        flat = x.contiguous().view(-1)
        n = flat.numel()
        out = torch.zeros_like(flat)
        tail, out_tail = flat[1:], out[1:]  # views at storage offset 1
        relu_atomic_kernel[(triton.cdiv(n - 1, 1024),)](tail, out_tail, gate, n - 1, BLOCK=1024)
        relu_atomic_kernel[(1,)](flat, out, gate, 1, BLOCK=1024)
        return out.view(x.shape)
