"""Worker-side Triton support: importing candidates, counting their kernel launches, warming up."""

from __future__ import annotations

import contextlib
from pathlib import Path

from kzcore import CompileError, LaunchCounter, guard, import_module_from_file


def load_module(path: Path):
    return import_module_from_file(path, path.stem)


_compile_only = [False]  # set while precompile() runs a forward: launches compile and return


def _jit_functions(module) -> list[tuple[object, bool]]:
    """(innermost jitted or interpreted function, whether an autotuner wraps it) for every kernel defined in
    ``module``."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import KernelInterface

    found: list[tuple[object, bool]] = []
    for value in vars(module).values():
        fn, tuned = value, False
        while isinstance(fn, KernelInterface) and isinstance(getattr(fn, "fn", None), KernelInterface):
            tuned = tuned or isinstance(fn, Autotuner)
            fn = fn.fn  # Autotuner / Heuristics wrap the jitted function in .fn
        python_fn = getattr(fn, "fn", None)
        if not isinstance(fn, KernelInterface) or getattr(python_fn, "__module__", None) != module.__name__:
            continue  # not a kernel, or one imported from elsewhere: only the candidate's own kernels count
        for i, (other, other_tuned) in enumerate(found):
            if other is fn:
                found[i] = (fn, other_tuned or tuned)
                break
        else:
            found.append((fn, tuned))
    return found


def kernel_names(module) -> list[str]:
    """The candidate's kernels' names: a Triton kernel is traced under its Python function's name."""
    return [fn.fn.__name__ for fn, _ in _jit_functions(module)]


def instrument(module):
    """Wrap each kernel's ``run`` (what ``kernel[grid](...)`` calls) to count launches, to keep the torch-op
    guard on the candidate's code inside the launch (`_launch_guard`), and to report Triton compilation failures
    as CompileError.
    Under precompile() a launch only compiles (Triton's ``warmup``) and is not counted."""
    from triton.compiler.errors import CompilationError

    count = [0]
    wrapped = []  # (kernel, its own run, the counting wrapper)
    for fn, tuned in _jit_functions(module):
        original = fn.run

        def run(*args, _original=original, _tuned=tuned, _fn=fn, **kwargs):
            if _compile_only[0]:
                if _tuned:  # the autotuner would time every config: leave it to the first real launch
                    raise guard.PrecompileAbort("autotuned kernel")
                kwargs["warmup"] = True
            else:
                count[0] += 1
            try:
                with _launch_guard(_fn, args, kwargs):
                    result = _original(*args, **kwargs)
                    if _compile_only[0]:
                        _load(result)
                    return result
            except CompilationError as exc:
                raise CompileError(f"Triton compilation failed: {exc}") from exc

        fn.run = run
        wrapped.append((fn, original, run))

    @contextlib.contextmanager
    def bare():
        """Triton's own ``run`` back in place (no count, no guard switch) while the candidate is timed."""
        for fn, original, _ in wrapped:
            fn.run = original
        try:
            yield
        finally:
            for fn, _, run in wrapped:
                fn.run = run

    return LaunchCounter(lambda: count[0], bare)


def _plain_arguments(args, kwargs) -> None:
    """Under the CPU interpreter, a launch's arguments must be plain: tensors, numbers, strings, dtypes, None.
    The interpreter reads an argument through its own methods (``data_ptr``, ``untyped_storage``, ``__index__``)
    inside the suspended launch, so an object of the candidate's there would run its code unguarded; a compiled
    kernel refuses such arguments anyway."""
    import torch
    from triton import language as tl

    plain = (torch.Tensor, int, float, bool, str, type(None), torch.dtype, tl.dtype, tl.constexpr)
    for name, value in [*((f"argument {i}", v) for i, v in enumerate(args)), *kwargs.items()]:
        if name == "grid":
            continue
        if type(value) not in (torch.Tensor, torch.nn.Parameter) and (
            isinstance(value, torch.Tensor) or not isinstance(value, plain)
        ):
            raise TypeError(
                f"kernel {name} is a {type(value).__name__}: a launch takes tensors, numbers, strings and dtypes"
            )


def _int_grid(grid):
    """``grid`` as a tuple of Python ints (a grid element of the candidate's own type would run its
    ``__index__`` or comparisons inside the suspended launch)."""
    items = grid if isinstance(grid, (tuple, list)) else (grid,)
    if not all(type(g) is int for g in items):
        kinds = ", ".join(sorted({type(g).__name__ for g in items}))
        raise TypeError(f"a kernel's grid must hold ints, not {kinds}")
    return tuple(items)


@contextlib.contextmanager
def _launch_guard(_fn, args, kwargs):
    """The torch-op guard around one launch. On a GPU it stays on throughout: Triton's own launch path runs no
    computing operator, and every callable of the candidate's that a launch calls back (a grid function,
    pre-run hooks, launch hooks, launch metadata, tensor-like arguments) is the forward's code. Under the CPU
    interpreter, which runs the kernel body with torch operators of its own, the launch is suspended and the
    candidate's callbacks that the launch calls are put back under the guard (`guard.guarded`), and its
    arguments and grid must be plain values (`_plain_arguments`, `_int_grid`)."""
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    from triton import knobs

    _plain_arguments(args, kwargs)
    if callable(kwargs.get("grid")):
        grid = kwargs["grid"]
        kwargs["grid"] = lambda meta, _grid=grid: _int_grid(_grid(meta))
    elif "grid" in kwargs:
        kwargs["grid"] = _int_grid(kwargs["grid"])
    runtime = getattr(knobs, "runtime", None)
    hooks = getattr(_fn, "pre_run_hooks", None)
    saved_hooks = list(hooks) if hooks is not None else None
    saved = {n: getattr(runtime, n, None) for n in ("launch_enter_hook", "launch_exit_hook")} if runtime else {}
    if callable(kwargs.get("grid")):
        kwargs["grid"] = guard.guarded(kwargs["grid"])
    if hooks is not None:
        hooks[:] = [guard.guarded(h) for h in hooks]
    for name, hook in saved.items():
        if hook is not None:
            setattr(runtime, name, guard.guarded(hook))
    try:
        with guard.suspended():
            yield
    finally:
        if hooks is not None:
            hooks[:] = saved_hooks
        for name, hook in saved.items():
            if hook is not None:
                setattr(runtime, name, hook)


def _load(compiled) -> None:
    """Do the part of a first launch that needs no GPU: build Triton's launcher for this signature (a
    system-compiler run), off the GPU lock. Loading the binary into the CUDA context is left to the kernel's
    first launch in the correctness trials, inside the shared hold of the GPU lock the trials take anyway: a
    hold of its own per kernel here waited out the timing then running and, before that, every worker queued
    to time, so each candidate reached its own timing later and the GPU sat idle when the queue ran dry."""
    if callable(getattr(compiled, "_init_handles", None)):  # Triton's CompiledKernel (3.x)
        _build_launcher(compiled)


def _build_launcher(compiled) -> None:
    """Where Triton builds a C launcher per signature (a system-compiler run of ~0.2 s, cached on disk and only
    imported after), build it here, off the GPU lock: inside it, the build kept a waiting timing (which needs
    every shared holder gone) out for its whole length. A Triton whose launcher needs no build, or whose API
    differs, is left to build what it needs in the load, as before."""
    if getattr(compiled, "module", None) is not None:
        return  # loaded already
    with contextlib.suppress(Exception):  # only a head start: the load below builds it and reports failures
        from triton.runtime import driver

        driver.active.launcher_cls(compiled.src, compiled.metadata)


def precompile(model, inputs) -> bool:
    """Run ``model``'s forward once with every kernel launch turned into a compile (no GPU work, no count),
    so the correctness trials find their kernels compiled. False when there is nothing to gain (the CPU
    interpreter compiles nothing) or the forward could not run this way (autotuning, a computing torch op,
    code that needs real results); the kernels then compile at their first launch. A compile error is
    raised: the candidate's verdict."""
    import os

    import torch

    if os.environ.get("TRITON_INTERPRET") == "1":
        return False
    _compile_only[0] = True
    try:
        with torch.no_grad(), guard.compile_only():
            model(*inputs)
        return True
    except CompileError:
        raise
    except Exception:
        return False
    finally:
        _compile_only[0] = False


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
