"""Worker-side Triton support: importing candidates, counting their kernel launches, warming up."""

from __future__ import annotations

from pathlib import Path

from kzcore.errors import CompileError
from kzcore.evaluate import guard
from kzcore.problems import import_module_from_file


def load_module(path: Path):
    return import_module_from_file(path, path.stem)


def _jit_functions(module) -> list:
    """The innermost jitted (or interpreted) function behind every kernel defined in ``module``."""
    from triton.runtime.jit import KernelInterface

    found = []
    for value in vars(module).values():
        fn = value
        while isinstance(fn, KernelInterface) and isinstance(getattr(fn, "fn", None), KernelInterface):
            fn = fn.fn  # Autotuner / Heuristics wrap the jitted function in .fn
        python_fn = getattr(fn, "fn", None)
        if not isinstance(fn, KernelInterface) or getattr(python_fn, "__module__", None) != module.__name__:
            continue  # not a kernel, or one imported from elsewhere: only the candidate's own kernels count
        if all(fn is not f for f in found):
            found.append(fn)
    return found


def instrument(module):
    """Wrap each kernel's ``run`` (what ``kernel[grid](...)`` calls) to count launches, to suspend the
    torch-op guard during the launch itself, and to report Triton compilation failures as CompileError."""
    from triton.compiler.errors import CompilationError

    count = [0]
    for fn in _jit_functions(module):
        original = fn.run

        def run(*args, _original=original, **kwargs):
            count[0] += 1
            try:
                with guard.suspended():
                    return _original(*args, **kwargs)
            except CompilationError as exc:
                raise CompileError(f"Triton compilation failed: {exc}") from exc

        fn.run = run
    return lambda: count[0]


def warm_up(device: str) -> None:
    """Import Triton and, on a GPU, build and launch a tiny kernel so the driver utilities and launcher
    toolchain are ready before the first candidate is timed against its deadline."""
    import triton  # noqa: F401

    if device != "cuda":
        return
    import torch

    from kz_triton import warmup_kernel

    x = torch.ones(1024, device="cuda")
    out = torch.empty_like(x)
    warmup_kernel.copy_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
