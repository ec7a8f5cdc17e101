"""Not a fault: a correct ReLU that first checks that the worker it runs in was left clean by the candidates
before it: working directory, stdout/stderr on the worker's log, signal handlers, timers. tests/test_faults.py
runs it after each fault; any dirty state makes this good candidate fail, with the reason in its message."""

import os
import signal
import sys

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


def dirty_state() -> list[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    log = os.path.realpath(os.path.join(here, "worker.log"))
    problems = []
    if os.getcwd() != here:
        problems.append(f"working directory is {os.getcwd()}, not the scratch dir {here}")
    for fd in (1, 2):
        target = os.path.realpath(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else "closed"
        if target != log:
            problems.append(f"fd {fd} is {target}, not the worker's log {log}")
    # the worker's own state: default handlers, but timer signals ignored (kzcore's ignore_timer_signals)
    for sig, want in (
        (signal.SIGTERM, signal.SIG_DFL),
        (signal.SIGUSR1, signal.SIG_DFL),
        (signal.SIGALRM, signal.SIG_IGN),
    ):
        if signal.getsignal(sig) != want:
            problems.append(f"{signal.Signals(sig).name} has handler {signal.getsignal(sig)}, not {want}")
    if signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0):
        problems.append(f"an interval timer is armed: {signal.getitimer(signal.ITIMER_REAL)}")
    print("probe: the worker looks clean", flush=True)  # raises if stdout is closed
    print("probe: stderr works", file=sys.stderr, flush=True)
    return problems


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        problems = dirty_state()
        if problems:
            raise RuntimeError("the worker was left dirty: " + "; ".join(problems))

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
