"""Runtime guard: records every PyTorch operator a candidate's forward dispatches outside its own kernel
launches (allocation, views, copies and shape queries are allowed; anything that computes is not), and
fills every uninitialised allocation the forward makes with NaN (integers: their maximum), so an output
left partly unwritten never shows stale memory that happens to hold the right answer.

Language plugins call `suspended()` around their kernel launches (the Triton interpreter itself runs
torch ops on the host; those are the kernel's, not the forward's), and `guarded()` around any code of the
candidate's that runs inside a launch (a grid function, pre-run and launch hooks): that code is the forward's,
and the guard records what it runs."""

from __future__ import annotations

import contextlib
import functools

ALLOWED_OPS = frozenset(
    """
    empty empty_like empty_strided empty_permuted new_empty new_empty_strided
    zeros zeros_like new_zeros ones ones_like new_ones full full_like new_full fill_ zero_ arange
    view _unsafe_view reshape _reshape_alias as_strided expand expand_as permute transpose t squeeze
    unsqueeze flatten unflatten slice select split split_with_sizes chunk unbind narrow detach alias
    lift_fresh lift_fresh_copy clone contiguous copy_ _to_copy to resize_ view_as
    _local_scalar_dense sym_size sym_stride sym_numel sym_storage_offset is_same_size is_contiguous
    stride size numel dim
    """.split()
)

UNINITIALISED = frozenset("empty empty_like empty_strided empty_permuted new_empty new_empty_strided".split())
# Tensor methods that hand a tensor's data to Python or NumPy, or run a Python function per element: work done
# there is no operator, so the dispatch mode never sees it (NumPy's BLAS, a list comprehension, ``apply_``)
# (a tensor's storage is refused by the static check only: Triton's own launch and compile paths reach it)
HOST_ESCAPES = ("numpy", "tolist", "__array__", "__dlpack__", "apply_", "map_", "map2_")
# Single values read on the host (`.item()`, `float(t)`: aten._local_scalar_dense) are allowed for a forward's
# scalars; past this many in one forward, the forward is reading the tensor's values one by one
SCALAR_READS = 64


def op_name(func) -> str:
    """An operator's name as `ALLOWED_OPS` spells it (``clone``) for ATen's own, and qualified by its namespace
    (``mylib::clone``) for any other: a custom operator named like an allowed one runs a Python implementation
    whose own operators the dispatch mode does not see."""
    name = func.overloadpacket.__name__
    namespace = getattr(func, "namespace", "aten")
    return name if namespace == "aten" else f"{namespace}::{name}"


_depth = 0  # >0 while a candidate kernel launch is in progress
_active: list = []  # the recorder of the forward in progress (empty outside one)


@contextlib.contextmanager
def suspended():
    """Run a block (a kernel launch) without the guard recording its operators."""
    global _depth
    from torch.utils._python_dispatch import _disable_current_modes

    _depth += 1
    try:
        with _disable_current_modes():
            yield
    finally:
        _depth -= 1


@contextlib.contextmanager
def resumed():
    """Inside `suspended()`: record again, with the forward's own recorder, for the length of the block (the
    candidate's own code that a launch calls back). Outside a suspended launch, or with no recorder active,
    nothing changes."""
    global _depth
    if _depth == 0 or not _active:
        yield
        return
    saved, _depth = _depth, 0
    try:
        with _active[-1]:
            yield
    finally:
        _depth = saved


def guarded(fn):
    """``fn`` wrapped to run under `resumed()`: for callables of the candidate's that a launch calls."""
    if fn is None or getattr(fn, "_kz_guarded", False):
        return fn

    def call(*args, **kwargs):
        with resumed():
            return fn(*args, **kwargs)

    # a function takes attributes; mypy, typing `call` as a Callable, cannot know that
    call._kz_guarded = True  # type: ignore[attr-defined]
    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


def watch_host_escapes() -> None:
    """Wrap `HOST_ESCAPES` on ``torch.Tensor`` (once per process, before the integrity baseline is taken) so
    that a call from the candidate's forward, outside its kernel launches, is recorded like a computing
    operator (``Tensor.numpy``): the output computed on the host and copied back by a kernel is not the
    kernel's work. The evaluator's own code calls them outside any forward, where nothing is recorded."""
    import torch

    for name in HOST_ESCAPES:
        original = getattr(torch.Tensor, name, None)
        if original is not None and not getattr(original, "_kz_host_escape", False):
            setattr(torch.Tensor, name, _recorded(name, original))


def _recorded(name: str, original):
    label = f"Tensor.{name}"

    @functools.wraps(original)
    def method(self, *args, **kwargs):
        if _active and _depth == 0 and _active[-1].record and label not in _active[-1].forbidden:
            _active[-1].forbidden.append(label)
        return original(self, *args, **kwargs)

    method._kz_host_escape = True  # type: ignore[attr-defined]
    return method


@functools.cache  # one class per process (a class statement per forward cost ~40 us a timed call)
def _mode_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class ComputeOpRecorder(TorchDispatchMode):
        def __init__(self, record: bool, fill: bool):
            super().__init__()
            self.record, self.fill = record, fill
            self.forbidden: list[str] = []
            self.scalar_reads = 0

        def __enter__(self):
            _active.append(self)
            return super().__enter__()

        def __exit__(self, *exc):
            try:
                return super().__exit__(*exc)
            finally:
                if _active and _active[-1] is self:
                    _active.pop()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = op_name(func)
            if self.record and _depth == 0 and name not in ALLOWED_OPS and name not in self.forbidden:
                self.forbidden.append(name)
            if self.record and _depth == 0 and name == "_local_scalar_dense":
                self.scalar_reads += 1
                if self.scalar_reads == SCALAR_READS + 1:
                    self.forbidden.append(f"Tensor.item (more than {SCALAR_READS} values read one by one)")
            out = func(*args, **(kwargs or {}))
            if self.fill and name in UNINITIALISED and isinstance(out, torch.Tensor):
                poison(out)
            return out

    return ComputeOpRecorder


class PrecompileAbort(Exception):
    """Raised inside a compile-only forward when it reaches something that would run GPU work."""


def _compile_only_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class ComputeOpRefuser(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = op_name(func)
            if _depth == 0 and name not in ALLOWED_OPS:
                raise PrecompileAbort(f"{name if '::' in name else 'aten.' + name} would compute")
            return func(*args, **(kwargs or {}))

    return ComputeOpRefuser


def compile_only():
    """A dispatch mode for a forward run only to compile its kernels (``kz_precompile``): allocation, views
    and copies run, any computing operator raises PrecompileAbort, nothing is poisoned."""
    global _depth
    _depth = 0
    return _compile_only_class()()


def poison(t) -> None:
    import torch

    if t.is_floating_point() or t.is_complex():
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).max)


def recorder(record: bool = True, fill: bool = True):
    """A fresh dispatch mode for one candidate forward; use as a context manager, then read ``.forbidden``
    (aten op names, and ``Tensor.<name>`` for `HOST_ESCAPES`; only collected when ``record``). ``fill``: fill
    uninitialised allocations (NaN; off for a timed call, where a fill would be timed as the candidate's work).
    Also resets the launch-depth counter, which candidate code runs beside and could have tampered with."""
    global _depth
    _depth = 0
    _active.clear()
    watch_host_escapes()
    return _mode_class()(record, fill)


def describe(forbidden: list[str], most: int = 8) -> str:
    """A recorder's ``forbidden`` list as a verdict's words, after the subject (``aten.`` before a bare op name):
    what trials and timed calls alike say of a forward that computed outside its kernels."""
    ops = ", ".join(op if "." in op or "::" in op else f"aten.{op}" for op in forbidden[:most])
    return f"ran PyTorch compute operators outside its kernels, or took tensor data to Python: {ops}"
