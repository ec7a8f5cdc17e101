"""The output check in one pass on the GPU. The core's check (``kzcore.compare_outputs``) runs about a
dozen torch passes over every output of every trial and checked timed pair; this kernel reads the reference
and the candidate's output once and returns, per output, what the check's fast path needs: how many elements
lie outside ``atol + rtol*|e|`` (NaN counts as outside), the largest absolute and relative errors, and the
2-norms of ``a - e`` and ``e`` over the elements where ``e`` is finite (the core's relative-error bound).
Anything else (an element outside, an infinity, a norm that fp32 cannot hold) goes to the core's exact path.

The kernel is compiled once per worker at start-up (`warm`), before any candidate's code runs, for each
output dtype it serves. It is never compiled later: a compile would read the worker's Triton cache, which a
candidate may write. A call whose specialisation was not warmed (another dtype, a misaligned pointer, more
than 2**31 elements) declines (`summarise` returns None) and the core's torch check answers. Triton's global
hooks and knobs that a candidate could set are cleared around the launch, and the partial sums start as NaN
and carry an element count, so a launch that did not run, or did not cover the output, is never read as a
pass."""

from __future__ import annotations

import contextlib
import functools
import sys

BLOCK = 4096
COLUMNS = 6  # elements seen, elements outside, max |a-e|, max relative, sum (a-e)^2, sum e^2
DTYPES = ("float32", "float16", "bfloat16")
MAX_ELEMENTS = 2**31 - 1  # an int32 n: a larger one changes the kernel's signature (a compile)
_warmed: set[tuple[int, str]] = set()  # (device index, dtype name) compiled before any candidate ran
# Triton settings read at launch that change which compiled kernel a launch picks, or run code around it
_RUNTIME_KNOBS = (
    "launch_enter_hook",
    "launch_exit_hook",
    "add_stages_inspection_hook",
    "jit_cache_hook",
    "jit_post_compile_hook",
    "kernel_load_start_hook",
    "kernel_load_end_hook",
    "debug",
)
_HOOK_CHAINS = ("launch_enter_hook", "launch_exit_hook", "kernel_load_start_hook", "kernel_load_end_hook")
_COMPILATION_KNOBS = ("instrumentation_mode", "fpsan_homomorphic_casts")


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["n"])
    def check_kernel(a_ptr, e_ptr, n, atol, rtol, out_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        e = tl.load(e_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        diff = tl.abs(a - e)
        size = tl.abs(e)
        within = diff <= size * rtol + atol  # False for NaN
        outside = mask & (within == 0)
        rel = diff / tl.maximum(size, atol)
        finite = mask & (e == e) & (size < float("inf"))
        d = tl.where(finite, a - e, 0.0)
        r = tl.where(finite, e, 0.0)
        row = out_ptr + pid * 6
        tl.store(row + 0, tl.sum(mask.to(tl.float32), axis=0))
        tl.store(row + 1, tl.sum(outside.to(tl.float32), axis=0))
        tl.store(row + 2, tl.max(tl.where(mask, diff, 0.0), axis=0))
        tl.store(row + 3, tl.max(tl.where(mask, rel, 0.0), axis=0))
        tl.store(row + 4, tl.sum(d * d, axis=0))
        tl.store(row + 5, tl.sum(r * r, axis=0))

    return check_kernel


@contextlib.contextmanager
def _plain_triton():
    """Triton's launch-time hooks and knobs at their defaults for the check's launch, then put back."""
    from triton import knobs

    saved = [(group, name, getattr(group, name)) for group, names in ((knobs.runtime, _RUNTIME_KNOBS),
             (knobs.compilation, _COMPILATION_KNOBS)) for name in names if hasattr(group, name)]  # fmt: skip
    try:
        for group, name, value in saved:
            if name in _HOOK_CHAINS:  # what the launcher calls: an empty chain, whatever was put there
                setattr(group, name, knobs.HookChain(reversed=getattr(value, "reversed", False)))
            else:
                setattr(group, name, {bool: False, str: ""}.get(type(value)))
        yield
    finally:
        for group, name, value in saved:
            setattr(group, name, value)


def _launch(e, a, atol: float, rtol: float):
    """The per-block partials (a device tensor, ``COLUMNS`` wide)."""
    import torch
    import triton

    n = e.numel()
    blocks = triton.cdiv(n, BLOCK)
    partial = torch.full((blocks, COLUMNS), float("nan"), dtype=torch.float32, device=e.device)
    on_gpu = torch.cuda.device(e.device) if e.is_cuda else contextlib.nullcontext()  # CPU: the interpreter
    with _plain_triton(), on_gpu:
        _kernel()[(blocks,)](a, e, n, float(atol), float(rtol), partial, BLOCK=BLOCK)
    return partial


def warm(device: str) -> None:
    """Compile the kernel for every dtype in ``DTYPES`` on the current GPU (a worker's start-up)."""
    if device != "cuda":
        return
    import torch

    index = torch.cuda.current_device()
    for name in DTYPES:
        x = torch.zeros(BLOCK + 1, dtype=getattr(torch, name), device="cuda")
        try:
            answer = summary(x, x, 1e-2, 1e-2)
            problem = None if answer is not None and answer[:3] == (0, 0, 0) else f"it answered {answer}"
        except Exception as exc:
            problem = str(exc)
        if problem:  # the core's torch check answers for this dtype; say why, once
            print(f"kz_triton: the one-pass output check failed its start-up run for {name} ({problem}); the "
                  "torch check answers", file=sys.stderr)  # fmt: skip
            continue
        _warmed.add((index, name))


def ready() -> bool:
    """Whether this process compiled the kernel (`warm`)."""
    return bool(_warmed)


def summarise(e, a, atol: float, rtol: float) -> tuple[float, float, float, float, float] | None:
    """(elements outside, max abs error, max relative error, ``||a - e||``, ``||e||``) for one output, or None
    where this check does not serve it (the core's torch check answers). ``e`` and ``a`` have the same shape,
    dtype and device (the core's checks before this one)."""
    if not (e.is_cuda and (e.device.index, str(e.dtype).removeprefix("torch.")) in _warmed):
        return None
    e, a = e.detach().contiguous().view(-1), a.detach().contiguous().view(-1)
    if not 0 < e.numel() <= MAX_ELEMENTS or e.data_ptr() % 16 or a.data_ptr() % 16:
        return None  # another specialisation than the one warmed
    return summary(e, a, atol, rtol)


def summary(e, a, atol: float, rtol: float) -> tuple[float, float, float, float, float] | None:
    """`summarise` without its gate: one launch over the flat tensors ``e`` and ``a`` (on a CPU, under Triton's
    interpreter)."""
    import torch

    partial = _launch(e, a, atol, rtol).double()
    seen, n_out, err_sq, ref_sq, max_abs, max_rel = torch.cat(
        [partial[:, [0, 1, 4, 5]].sum(0), partial[:, 2:4].amax(0)]
    ).tolist()  # one device sync
    if seen != e.numel():  # the launch did not run, or not over every element
        return None
    return n_out, max_abs, max_rel, err_sq**0.5, ref_sq**0.5
