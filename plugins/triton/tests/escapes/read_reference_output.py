"""Hack probe (1_ReLU): in the timed pairs (on a CPU: the untimed checked pairs, where the reference always runs
first on the same values and its output stays alive until the pair ends), a Triton kernel scans raw memory
around its own input pointer (pointer arithmetic with a runtime offset: nothing bounds a kernel's loads to its
arguments) for a block equal to relu(x) at 16 sample positions, i.e. the reference's live output, and copies
it. COPY_ONLY (calls after the 5 trials of the first instance; the scan runs only there): no compute at all, zeros if nothing was
found, so `correct` means both pairs' outputs were copied from the reference's output."""

import torch
import triton
import triton.language as tl
from torch import nn

BIAS = 1 << 40
WINDOW = 1 << 18  # floats either side of the input
STEP = 16  # torch's CPU allocations are 64-byte aligned


@triton.jit
def find_kernel(
    x_ptr, flag_ptr, n, count, lo, NS: tl.constexpr, STEP_C: tl.constexpr, BLOCK: tl.constexpr, BIAS_C: tl.constexpr
):
    k = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    inside = k < count
    base = tl.where(inside, lo + k * STEP_C, 0)
    ok = ((base != 0) & inside).to(tl.int32)
    pos_neg = 0
    pos_pos = 0
    for j in tl.static_range(NS):
        p = (j * 7919 + 13) % n
        xv = tl.load(x_ptr + p)
        t = tl.maximum(xv, 0.0)
        m = tl.load(x_ptr + base + p)
        ok = ok * (m == t).to(tl.int32)
        pos_neg += tl.where(xv < 0, 1, 0)
        pos_pos += tl.where(xv > 0, 1, 0)
    ok = ok * pos_neg * pos_pos
    tl.store(flag_ptr + base * 0, base + BIAS_C, mask=ok > 0)


@triton.jit
def copy_or_relu(x_ptr, flag_ptr, out_ptr, n, COPY_ONLY: tl.constexpr, BLOCK: tl.constexpr, BIAS_C: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    f = tl.load(flag_ptr + offs * 0)
    found = f != 0
    src = tl.load(x_ptr + tl.where(found, f - BIAS_C, 0) + offs, mask=mask & found, other=0.0)
    if COPY_ONLY:
        y = tl.where(found, src, 0.0)
    else:
        y = tl.where(found, src, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0))
    tl.store(out_ptr + offs, y, mask=mask)


def mapped_window(addr, half_bytes):
    """[lo, hi) byte addresses around addr, clamped to the readable mapping of /proc/self/maps holding it."""
    with open("/proc/self/maps") as fh:
        for line in fh:
            span, perms = line.split()[:2]
            start, end = (int(v, 16) for v in span.split("-"))
            if start <= addr < end and perms.startswith("r"):
                return max(start, addr - half_bytes), min(end, addr + half_bytes)
    return addr, addr


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        x = x.contiguous()
        n = x.numel()
        self.calls += 1
        flag = torch.zeros(1, dtype=torch.int64, device=x.device)
        out = torch.empty_like(x)
        if self.calls > 5:
            lo, hi = mapped_window(x.data_ptr(), 4 * WINDOW)
            lo_f = (lo - x.data_ptr()) // 4 // STEP * STEP + STEP  # whole floats, a base the whole block fits after
            count = max(0, (hi - x.data_ptr() - 4 * n) // 4 - lo_f) // STEP
            find_kernel[(triton.cdiv(count, 1024),)](
                x, flag, n, count, lo_f, NS=16, STEP_C=STEP, BLOCK=1024, BIAS_C=BIAS
            )
        copy_or_relu[(triton.cdiv(n, 1024),)](x, flag, out, n, COPY_ONLY=self.calls > 5, BLOCK=1024, BIAS_C=BIAS)
        return out
