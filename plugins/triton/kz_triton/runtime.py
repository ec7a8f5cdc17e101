"""Worker-side Triton support: importing candidates, counting their kernel launches, warming up."""

from __future__ import annotations

import contextlib
import functools
import types
from pathlib import Path

from kzcore import CompileError, LaunchCounter, guard, import_module_from_file

_CHECKED: dict[str, str] = {}  # a candidate's file -> the text the static check read (read before it runs)


def load_module(path: Path):
    """Import the candidate from ``path``, keeping the text it had before any of its code ran: the static check's
    text (kzcore writes the checked source there), which the CPU interpreter must run (`_pin_kernels`)."""
    import os

    if os.environ.get("TRITON_INTERPRET") == "1":
        _interpreter_snapshot()  # Triton's interpreter as it is before any candidate code ran
    _CHECKED.clear()  # one candidate per worker at a time: the last one's text and rewrites are not needed
    _INSTALLED.clear()
    _CHECKED[os.fspath(path)] = path.read_text()
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
    ours: set[int] = set()  # the wrappers' ids: a kernel's `run` must be one of them at an interpreted launch

    def counting(fn, original, tuned):
        # what the wrapper calls lives in this closure's cells, not in keyword defaults: a function's
        # `__kwdefaults__` is a live dict that anyone holding the kernel could rewrite
        def run(*args, **kwargs):
            if _compile_only[0]:
                if tuned:  # the autotuner would time every config: leave it to the first real launch
                    raise guard.PrecompileAbort("autotuned kernel")
                kwargs["warmup"] = True
            else:
                count[0] += 1
            try:
                with _launch_guard(fn, args, kwargs, _Launch(module, fn, original, ours)):
                    result = original(*args, **kwargs)
                    if _compile_only[0]:
                        _load(result)
                    return result
            except CompilationError as exc:
                raise CompileError(f"Triton compilation failed: {exc}") from exc

        return run

    for fn, tuned in _jit_functions(module):
        original = fn.run
        run = counting(fn, original, tuned)
        fn.run = run
        ours.add(id(run))
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


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made at run time (a class statement, type()), not a C type


def _genuine_class(cls, candidate_module: str = "") -> bool:
    """A class that is not the candidate's: a static C type (``int``, ``function``, ``torch.dtype``), or a class
    that is exactly what its ``__module__`` and ``__qualname__`` name, in a module other than the candidate's. A
    class statement may write any ``__module__`` (``"triton.language.core"``) but cannot make that module's name
    refer to it."""
    import sys

    if not isinstance(cls, type):
        return False
    if not cls.__flags__ & _HEAPTYPE:
        return True
    name = cls.__dict__.get("__module__")
    if not isinstance(name, str) or name == candidate_module or name not in sys.modules:
        return False
    found = sys.modules[name]
    for part in cls.__qualname__.split("."):
        found = vars(found).get(part) if isinstance(found, type) else getattr(found, part, None)
        if found is None:
            return False
    return found is cls


# the libraries whose objects may stand among a kernel module's globals: none of their types runs code of the
# candidate's when its ``__class__`` is read or it is compared (a weakref proxy forwards both to its referent, a
# mock's are configurable: their modules are not here)
TRUSTED_ROOTS = frozenset(
    """builtins types typing __future__ _frozen_importlib _frozen_importlib_external importlib functools
    collections abc enum dataclasses math numpy torch triton""".split()
)


def module_value_problem(name: str, value, candidate_module: str) -> str:
    """Why a global of the kernel's module may not stand there at an interpreted launch, or "": the interpreter
    looks at every global of the kernel's module (``inspect.ismodule(value) and value in [tl, tl.core]``), which
    reads ``__class__`` and compares, inside the suspended launch; an object of the candidate's own class (a
    module subclass with ``__eq__``, a ``__class__`` property) or a class with a metaclass of its own would run its
    code there unguarded."""
    kind = type(value)
    if _genuine_class(kind, candidate_module) and str(kind.__module__).split(".")[0] in TRUSTED_ROOTS:
        return ""
    return (
        f"the kernel's module binds `{name}` to an object of class `{type(value).__qualname__}`, which the "
        "candidate defined or which is no type of Python's, NumPy's, torch's or triton's: under the CPU interpreter "
        "a kernel module's globals must be modules, functions, classes, kernels and values of those types"
    )


def _plain_value(value) -> bool:
    """Exactly a tensor, a Python scalar, a string, None, a dtype (torch's or Triton's own), a ``tl.constexpr`` of
    one of those but a tensor, a host ``TensorDescriptor`` of a tensor, or a tuple of plain values: no subclass,
    whose methods would be the candidate's."""
    import torch
    from triton import language as tl
    from triton.runtime.jit import TensorWrapper

    kind = type(value)
    if kind in (torch.Tensor, torch.nn.Parameter, int, float, bool, str, type(None), torch.dtype):
        return True
    if isinstance(value, tl.dtype):  # tl.float32, a pointer type: Triton's classes only
        return kind.__module__.startswith("triton.") and _genuine_class(kind)
    if kind is tl.constexpr:
        return (
            type(value.value) is not torch.Tensor and _plain_value(value.value) and not isinstance(value.value, tuple)
        )
    if kind is tuple:
        return all(_plain_value(v) for v in value)
    if kind is TensorWrapper:  # triton.reinterpret(x, dtype)
        return type(value.base) is torch.Tensor and _plain_value(value.dtype)
    if kind is _tensor_descriptor_class():  # TensorDescriptor.from_tensor(x, block_shape)
        ints = all(type(v) is int for part in (value.shape, value.strides, value.block_shape) for v in part)
        return type(value.base) is torch.Tensor and ints and type(value.padding) is str
    return False


def _tensor_descriptor_class():
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor


def _bound_arguments(args, kwargs, names) -> dict:
    """A launch's arguments by the kernel parameter they bind to (``names``: its ``arg_names``; keywords naming
    none are left out, as the interpreter drops them; None: every keyword kept)."""
    names = list(names) if names is not None else None
    positional = {(names[i] if names and i < len(names) else i): v for i, v in enumerate(args)}
    return {**positional, **{k: v for k, v in kwargs.items() if names is None or k in names}}


def _constexpr_parameters(fn) -> frozenset[str]:
    """The names of the kernel's parameters annotated ``tl.constexpr`` (as an object or, under ``from __future__
    import annotations``, as text)."""
    import inspect

    from triton import language as tl

    python_fn = getattr(fn, "fn", None)
    if python_fn is None:
        return frozenset()
    out = set()
    for name, param in inspect.signature(python_fn).parameters.items():
        note = param.annotation
        if note is tl.constexpr or (isinstance(note, str) and note.strip("'\" ").rsplit(".", 1)[-1] == "constexpr"):
            out.add(name)
    return frozenset(out)


def _tensor_for_constexpr(fn, args, kwargs) -> None:
    """A tensor for a ``tl.constexpr`` parameter: the interpreter hands a constexpr's value to the body as it is,
    so the body would hold the host tensor itself and could run torch's methods on it (a compiled kernel refuses
    a tensor there)."""
    import torch
    from triton.runtime.jit import TensorWrapper

    constexprs = _constexpr_parameters(fn)
    if not constexprs:
        return
    given = _bound_arguments(args, kwargs, getattr(fn, "arg_names", None))
    for name in sorted(constexprs & given.keys()):
        if isinstance(given[name], (torch.Tensor, TensorWrapper)):
            raise TypeError(f"kernel argument `{name}` is a tl.constexpr parameter given a tensor: pass tensors to "
                            "pointer parameters")  # fmt: skip


def _plain_arguments(args, kwargs) -> None:
    """Under the CPU interpreter, a launch's arguments must be plain (`_plain_value`): tensors, numbers,
    strings, dtypes, None, tl.constexpr of a scalar. The interpreter reads an argument through its own methods
    (``data_ptr``, ``untyped_storage``, ``__index__``, comparisons) inside the suspended launch, and the kernel body
    gets a constexpr's value as it is, so an object of the candidate's there (a subclass of int or of
    tl.constexpr, a tensor or function in a constexpr) would run its code unguarded; a compiled kernel refuses such
    arguments anyway."""
    for name, value in [*((f"argument {i}", v) for i, v in enumerate(args)), *kwargs.items()]:
        if name == "grid":
            continue
        if not _plain_value(value):
            kind = type(value).__name__
            if type(value).__name__ == "constexpr":
                kind = f"constexpr of {type(value.value).__name__}"
            raise TypeError(
                f"kernel {name} is a {kind}: a launch takes tensors, numbers, strings and dtypes (exactly those "
                "types), and tl.constexpr of a number, string or dtype"
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
def _launch_guard(_fn, args, kwargs, launch: _Launch | None = None):
    """The torch-op guard around one launch. On a GPU it stays on throughout: Triton's own launch path runs no
    computing operator, and every callable of the candidate's that a launch calls back (a grid function,
    pre-run hooks, launch hooks, launch metadata, tensor-like arguments) is the forward's code. Under the CPU
    interpreter, which runs the kernel body with torch operators of its own, the launch is suspended and the
    candidate's callbacks that the launch calls are put back under the guard (`guard.guarded`), and its
    arguments and grid must be plain values (`_plain_arguments`, `_int_grid`); the interpreter must be Triton's
    own and run the kernels the static check read (`_Launch.verify`), checked again after each callback."""
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    from triton import knobs

    _plain_arguments(args, kwargs)
    _tensor_for_constexpr(_fn, args, kwargs)
    ranges = _argument_ranges(args, kwargs, getattr(_fn, "arg_names", None))
    if launch is not None:
        launch.verify()
    recheck = launch.verify if launch is not None else (lambda: None)
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
        kwargs["grid"] = _then(guard.guarded(kwargs["grid"]), recheck)
    if hooks is not None:
        hooks[:] = [_then(guard.guarded(h), recheck) for h in hooks]
    for name, hook in saved.items():
        if hook is not None:
            setattr(runtime, name, _then(guard.guarded(hook), recheck))
    _MEMORY_SCOPES.append(ranges)
    try:
        with guard.suspended():
            yield
    finally:
        _MEMORY_SCOPES.pop()
        if hooks is not None:
            hooks[:] = saved_hooks
        for name, hook in saved.items():
            if hook is not None:
                setattr(runtime, name, hook)


def _then(callback, check):
    """``callback`` followed by ``check`` (what a candidate's callback inside the launch may have changed)."""

    def call(*args, **kwargs):
        result = callback(*args, **kwargs)
        check()
        return result

    return call


_INTERPRETER_CLASSES = (
    "InterpretedFunction",
    "FunctionRewriter",
    "GridExecutor",
    "ASTTransformer",
    "_InterpreterComparison",
)
_INSTANCE_KEYS = frozenset(("fn", "rewriter", "kwargs", "pre_run_hooks", "arg_names", "run"))


class MemoryAccessRefused(RuntimeError):
    """An interpreted kernel's load or store outside the memory of the launch's tensor arguments."""


_MEMORY_SCOPES: list[list[tuple[int, int]]] = []  # per active launch: its arguments' storages


def _argument_ranges(args, kwargs, names=None) -> list[tuple[int, int]]:
    """[start, end) of the storage of every tensor among a launch's arguments (in tuples, `triton.reinterpret`
    wrappers and tensor descriptors too): only those bound to the kernel's parameters (``names``, its
    ``arg_names``; the interpreter drops other keywords). Under the CPU interpreter every tensor must be on the
    CPU (a tensor elsewhere is run on a host copy whose addresses are the interpreter's own): ``TypeError``."""
    import torch

    ranges: list[tuple[int, int]] = []
    pending = list(_bound_arguments(args, kwargs, names).values())
    while pending:
        value = pending.pop()
        if isinstance(value, tuple):
            pending.extend(value)
            continue
        base = getattr(value, "base", None)
        if not isinstance(value, torch.Tensor) and isinstance(base, torch.Tensor):
            value = base  # triton.reinterpret's TensorWrapper, a TensorDescriptor
        if isinstance(value, torch.Tensor):
            if value.device.type != "cpu":
                raise TypeError(f"a kernel argument is a tensor on {value.device}: under the CPU interpreter a "
                                "launch takes CPU tensors only")  # fmt: skip
            storage = value.untyped_storage()
            ranges.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    return ranges


def _check_access(ptrs, mask, size: int, kind: str) -> None:
    """Every address ``ptrs`` accesses (where ``mask`` is set), ``size`` bytes each, must lie inside one of the
    current launch's argument storages (`_MEMORY_SCOPES`). Outside every launch kzcore instrumented (a kernel
    the candidate kept out of its module's namespace, so never instrumented) nothing may be accessed."""
    import numpy as np

    if not _MEMORY_SCOPES:
        raise MemoryAccessRefused(
            f"a kernel {kind} outside every instrumented launch (a kernel must be a module-level @triton.jit "
            "function of the candidate's module, launched as kernel[grid](...))"
        )
    addresses = np.asarray(ptrs).astype(np.uint64, copy=False).reshape(-1)
    if mask is not None:
        addresses = addresses[np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(ptrs)).reshape(-1)]
    if not addresses.size:
        return
    inside = np.zeros(addresses.shape, dtype=bool)
    for start, end in _MEMORY_SCOPES[-1]:
        inside |= (addresses >= np.uint64(start)) & (addresses + np.uint64(size) <= np.uint64(end))
    if not inside.all():
        raise MemoryAccessRefused(
            f"a kernel {kind} at {int(addresses[~inside][0]):#x} lies outside every tensor argument of its launch "
            "(a kernel may read and write only the memory of the tensors it is given)"
        )


class _BoundedMemory:
    """Triton's interpreter's memory functions (its ``_interpreter`` extension module: ``load``, ``store``,
    ``atomic_cas``, ``atomic_rmw``, which take raw addresses) with each access checked against the current
    launch's tensor arguments (`_check_access`). Under the CPU interpreter a pointer is a host address, and the
    evaluator's own memory (the reference's inputs and outputs, its settings) lies in the same process: without
    this a kernel could read the reference's output or rewrite the inputs the reference is about to run on.
    Everything else passes through to the extension module."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def load(self, ptrs, mask, other, dtype):
        import numpy as np

        _check_access(ptrs, mask, np.dtype(dtype).itemsize, "load")
        return self._real.load(ptrs, mask, other, dtype)

    def store(self, ptrs, value, mask):
        _check_access(ptrs, mask, value.dtype.itemsize, "store")
        return self._real.store(ptrs, value, mask)

    def atomic_cas(self, ptrs, cmp, val, sem):
        _check_access(ptrs, None, val.dtype.itemsize, "atomic")
        return self._real.atomic_cas(ptrs, cmp, val, sem)

    def atomic_rmw(self, op, ptrs, val, mask, sem):
        _check_access(ptrs, mask, val.dtype.itemsize, "atomic")
        return self._real.atomic_rmw(op, ptrs, val, mask, sem)


@functools.cache
def _interpreter_snapshot() -> dict:
    """Triton's interpreter module and classes as they were before any candidate ran (taken at a worker's start,
    `warm_up`, and before a candidate is imported, `load_module`), its memory functions bounded first
    (`_BoundedMemory`)."""
    from triton.runtime import interpreter

    if not isinstance(interpreter._interpreter, _BoundedMemory):
        interpreter._interpreter = _BoundedMemory(interpreter._interpreter)

    semantic = interpreter.interpreter_semantic
    classes = [getattr(interpreter, n) for n in _INTERPRETER_CLASSES] + [type(semantic)]
    return {
        "module": interpreter,
        "globals": {k: v for k, v in vars(interpreter).items() if not (k.startswith("__") and k.endswith("__"))},
        "classes": {cls: dict(vars(cls)) for cls in classes},
        "semantic": dict(vars(semantic)),
        # each method's code: a swapped `__code__` keeps the function object (and so the class's dict) unchanged
        "codes": {(cls, k): v.__code__ for cls in classes for k, v in vars(cls).items() if hasattr(v, "__code__")},
    }


_INSTALLED: dict = {}  # kernel function -> the rewrite `_pin_kernels` put in the interpreter's cache


class LaunchRefused(RuntimeError):
    """An interpreted launch that would not run the interpreter's own code on the kernels the static check read."""


class _Launch:
    """What an interpreted launch of ``fn`` (a kernel of ``module``) checks before the kernel body runs."""

    def __init__(self, module, fn, original, ours):
        self.module, self.fn, self.original, self.ours = module, fn, original, ours

    def verify(self) -> None:
        snap = _interpreter_snapshot()
        self._interpreter_unchanged(snap)
        self._injected_globals(snap)
        self._plain_globals(snap)
        run = snap["classes"][snap["module"].InterpretedFunction].get("run")
        if (  # a bound method exactly: any object can carry `__func__` and `__self__` attributes
            self.original.__class__ is not types.MethodType
            or self.original.__func__ is not run
            or self.original.__self__ is not self.fn
        ):
            raise LaunchRefused(f"kernel `{_name(self.fn)}`: its launch method was replaced before it was instrumented")
        _pin_kernels(self.module, snap, self.ours)

    @staticmethod
    def _interpreter_unchanged(snap) -> None:
        module = snap["module"]
        now = {k: v for k, v in vars(module).items() if not (k.startswith("__") and k.endswith("__"))}
        changed = {k for k in now.keys() | snap["globals"].keys() if now.get(k) is not snap["globals"].get(k)}
        for cls, members in snap["classes"].items():
            current = vars(cls)
            changed |= {f"{cls.__name__}.{k}" for k in current.keys() | members.keys() if k != "rewritten_fn"
                        and current.get(k) is not members.get(k)}  # fmt: skip
        changed |= {f"{cls.__name__}.{k} (its code)" for (cls, k), code in snap["codes"].items()
                    if getattr(vars(cls).get(k), "__code__", None) is not code}  # fmt: skip
        semantic = vars(module.interpreter_semantic) if "interpreter_semantic" not in changed else {}
        changed |= {f"interpreter_semantic.{k}" for k in semantic.keys() | snap["semantic"].keys()
                    if semantic.get(k) is not snap["semantic"].get(k)}  # fmt: skip
        if changed:
            raise LaunchRefused(f"Triton's interpreter was changed ({', '.join(sorted(changed)[:5])}): launch refused")

    def _plain_globals(self, snap) -> None:
        """Every global of the kernel's module (and of the kernel function's own globals, where they differ) but
        those the interpreter put there itself is one the interpreter can look at without running the candidate's
        code (`module_value_problem`)."""
        namespaces = [vars(self.module)]
        own = getattr(getattr(self.fn, "fn", None), "__globals__", None)
        if own is not None and own is not namespaces[0]:
            namespaces.append(own)
        injected = snap["globals"]  # what the interpreter copies into a kernel's module is its own (checked above)
        for namespace in namespaces:
            for name, value in list(namespace.items()):
                if name in injected and value is injected[name]:
                    continue
                problem = module_value_problem(name, value, self.module.__name__)
                if problem:
                    raise LaunchRefused(problem)

    def _injected_globals(self, snap) -> None:
        """Each name the interpreter puts in the kernel's module (`FunctionRewriter._compile_and_exec` adds its
        globals where the module has none) must be the interpreter's own object there."""
        from kz_triton.static import INTERPRETER_PREFIXES, interpreter_globals

        namespace = vars(self.module)
        names = interpreter_globals() | {n for n in snap["globals"] if n.startswith(INTERPRETER_PREFIXES)}
        for name in names:
            value = snap["globals"].get(name)
            if name in namespace and namespace[name] is not value:
                raise LaunchRefused(
                    f"the kernel's module binds `{name}`, a name Triton's interpreter puts there: its own must run"
                )


def _name(fn) -> str:
    return getattr(getattr(fn, "fn", None), "__name__", "?")


def _pin_kernels(module, snap, ours) -> None:
    """Make the interpreter run, for every kernel of the candidate's module, a rewrite of the source the static
    check read: each kernel must be one the check saw (a ``@triton.jit`` function at its line of the checked
    text: not one made by calling ``triton.jit``), an unaltered interpreter kernel object; its source is put
    back in ``linecache`` from the checked text, the source the interpreter reads is compared with it, and its
    entry in the interpreter's class-level rewrite cache (``InterpretedFunction.rewritten_fn``) is replaced by a
    fresh rewrite of that source."""
    import inspect
    import linecache

    interpreter = snap["module"]
    cache = interpreter.InterpretedFunction.rewritten_fn
    for kernel, _tuned in _jit_functions(module):
        python_fn = kernel.fn
        where = f"kernel `{getattr(python_fn, '__name__', '?')}`"
        if type(kernel) is not interpreter.InterpretedFunction:
            raise LaunchRefused(f"{where} is a {type(kernel).__name__}, not Triton's interpreted kernel")
        extra = set(vars(kernel)) - _INSTANCE_KEYS
        if extra or ("run" in vars(kernel) and id(vars(kernel)["run"]) not in ours):
            raise LaunchRefused(f"{where}: the kernel object was altered ({', '.join(sorted(extra)) or 'run'})")
        code = getattr(python_fn, "__code__", None)
        source = _CHECKED.get(getattr(code, "co_filename", None))
        kernels = _checked_kernels(source) if source is not None else {}
        if (
            code is None
            or type(python_fn).__name__ != "function"
            or (python_fn.__name__, code.co_firstlineno) not in kernels
        ):
            raise LaunchRefused(
                f"{where} (line {getattr(code, 'co_firstlineno', '?')}) is not a @triton.jit kernel the static check "
                "read: a kernel is made only by decorating a module-level function with @triton.jit"
            )
        checked = source.splitlines(True)
        held = linecache.cache.get(code.co_filename)
        if held is not None and len(held) > 2 and held[2] != checked:
            raise LaunchRefused(f"{where}: linecache holds other text for the candidate's file than the checked source")
        if cache.get(python_fn, _INSTALLED.get(python_fn)) is not _INSTALLED.get(python_fn):
            raise LaunchRefused(f"{where}: the interpreter's rewrite cache holds a function that is not its rewrite")
        linecache.cache[code.co_filename] = (len(source), None, checked, code.co_filename)
        lines, start = inspect.getsourcelines(python_fn)
        last = kernels[(python_fn.__name__, code.co_firstlineno)][0]
        if (
            start != code.co_firstlineno
            or lines != checked[start - 1 : start - 1 + len(lines)]
            or start + len(lines) - 1 < last
        ):
            raise LaunchRefused(
                f"{where}: the source the interpreter would run is not the source the static check read"
            )
        cache[python_fn] = _INSTALLED[python_fn] = interpreter.FunctionRewriter(python_fn).rewrite_ast()


@functools.lru_cache(maxsize=8)
def _checked_kernels(source: str):
    from kz_triton.static import checked_kernels

    return checked_kernels(source)


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
    import os

    import triton  # noqa: F401

    if os.environ.get("TRITON_INTERPRET") == "1":
        _interpreter_snapshot()  # before any candidate: what each interpreted launch compares the interpreter with
    if device != "cuda":
        return
    import torch

    from kz_triton import warmup_kernel

    x = torch.ones(1024, device="cuda")
    out = torch.empty_like(x)
    warmup_kernel.copy_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
