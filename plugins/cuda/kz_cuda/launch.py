"""The launcher API a candidate imports: ``load_kernels(SOURCE)["name"](grid=..., block=..., args=...)``.

``load_kernels`` compiles through ``compile`` (cached) and parses the kernels' signatures; calling a kernel
checks the launch configuration and the arguments against the signature (``signature``), then launches on
torch's current stream through the CUDA driver API (``cuda.bindings.driver``, imported on first launch).
Every successful launch is counted under the module that loaded the kernel, for ``kz_instrument_candidate``.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import sys
from collections.abc import Mapping, Sequence

from kz_cuda.compile import DEFAULT_ARCH, CompiledModule, compile_cuda
from kz_cuda.signature import KernelSignature, check_args, launch_dims, parse_kernels, signature_text
from kzcore import guard

NEEDS_GPU = "CUDA candidates need a GPU; compiled OK with NVRTC for {arch}"

_launches: collections.Counter[str] = collections.Counter()  # owner module name -> successful launches


class GPURequiredError(RuntimeError):
    """A kernel was launched in a process without a CUDA device (it compiled; it cannot run)."""


def launches_of(module_name: str) -> int:
    return _launches[module_name]


_execution = {"device": None}  # set by the evaluator worker: "cuda" or "cpu"; None = wherever torch can run


def set_execution_device(device: str) -> None:
    """Called when a worker loads a candidate: on "cpu" kernels compile (for DEFAULT_ARCH) but never launch,
    even on a machine that has a GPU."""
    _execution["device"] = device


def current_arch() -> str:
    """The architecture kernels are compiled for in this process: the GPU's own, else DEFAULT_ARCH."""
    return arch_for_device(_execution["device"] or "cuda")


def can_launch() -> bool:
    import torch

    return _execution["device"] != "cpu" and torch.cuda.is_available()


@functools.cache
def arch_for_device(device: str) -> str:
    if device == "cuda":
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    return DEFAULT_ARCH


class Kernel:
    """One launchable ``extern "C" __global__`` kernel of a compiled module."""

    def __init__(self, compiled: CompiledModule, signature: KernelSignature, owner: str):
        self.compiled, self.signature, self.owner = compiled, signature, owner
        self.name = signature.name

    def __repr__(self) -> str:
        return f"<kz_cuda kernel {signature_text(self.signature)} for {self.compiled.arch}>"

    def __call__(self, *, grid, block, args: Sequence, shared_mem: int = 0) -> None:
        g, b, shared = launch_dims(grid, block, shared_mem)
        check_args(self.signature, args)
        if not can_launch():
            raise GPURequiredError(NEEDS_GPU.format(arch=self.compiled.arch))
        with guard.suspended():  # the launcher's own host work is not the candidate's forward
            values = pack_args(self.signature, args)
            _launch(self, g, b, shared, values)
        _launches[self.owner] += 1


class KernelSet(Mapping):
    """The launchable kernels of one source string, by name."""

    def __init__(self, compiled: CompiledModule, kernels: dict[str, Kernel], others: list[str]):
        self.compiled, self._kernels, self._others = compiled, kernels, others

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self._kernels[name]
        except KeyError:
            hint = f'; `{name}` is not declared extern "C"' if name in self._others else ""
            raise KeyError(
                f"no launchable kernel `{name}` (launchable: {', '.join(self._kernels) or 'none'}{hint}); "
                'declare kernels as extern "C" __global__ void name(...)'
            ) from None

    def __iter__(self):
        return iter(self._kernels)

    def __len__(self) -> int:
        return len(self._kernels)


def load_kernels(source: str, options: Sequence[str] = ()) -> KernelSet:
    """Compile ``source`` (cached per process by source, options and architecture) and return its
    ``extern "C" __global__`` kernels by name. Raises CompileError with the NVRTC log on failure."""
    if not isinstance(source, str):
        raise TypeError(f"load_kernels takes the CUDA source as a str, got {type(source).__name__}")
    owner = sys._getframe(1).f_globals.get("__name__", "?")
    compiled = compile_cuda(source, arch=current_arch(), options=tuple(options), label="load_kernels source")
    signatures = parse_kernels(source)
    kernels = {n: Kernel(compiled, s, owner) for n, s in signatures.items() if s.extern_c}
    return KernelSet(compiled, kernels, [n for n, s in signatures.items() if not s.extern_c])


def pack_args(signature: KernelSignature, args: Sequence) -> list:
    """ctypes values for the driver, one per parameter (device pointers for tensors); ``check_args`` has
    already matched kinds and dtypes. Tensors must be on the current CUDA device."""
    import torch

    device = torch.cuda.current_device()
    values = []
    for i, (param, arg) in enumerate(zip(signature.params, args)):
        if param.kind == "pointer":
            if arg.device.type != "cuda" or arg.device.index != device:
                raise ValueError(
                    f"{signature.name} argument {i} ({param.describe()}): a tensor on {arg.device}; "
                    f"kernels take tensors on cuda:{device}"
                )
            values.append(ctypes.c_void_p(arg.data_ptr()))
        else:
            values.append(arg.as_ctype())
    return values


# ---------------------------------------------------------------------------------------------------
# driver calls (GPU only)
# ---------------------------------------------------------------------------------------------------

_functions: dict[tuple[str, int, str], object] = {}  # (module key, device, kernel name) -> CUfunction
_modules: dict[tuple[str, int], object] = {}  # (module key, device) -> CUmodule, kept loaded for the process


def _check(result):
    from cuda.bindings import driver

    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, text = driver.cuGetErrorString(err)
        text = text.decode() if isinstance(text, bytes) else text
        raise RuntimeError(f"CUDA error: {getattr(err, 'name', err)}: {text}")
    return rest[0] if len(rest) == 1 else rest


def _ensure_context(device: int) -> None:
    """Make the device's primary context (the one torch uses) current on this thread."""
    from cuda.bindings import driver

    _check(driver.cuInit(0))
    ctx = _check(driver.cuCtxGetCurrent())
    if not int(ctx):
        dev = _check(driver.cuDeviceGet(device))
        _check(driver.cuCtxSetCurrent(_check(driver.cuDevicePrimaryCtxRetain(dev))))


def _function(kernel: Kernel, device: int):
    from cuda.bindings import driver

    key = (kernel.compiled.key, device, kernel.name)
    fn = _functions.get(key)
    if fn is None:
        _ensure_context(device)
        mod_key = (kernel.compiled.key, device)
        if mod_key not in _modules:
            _modules[mod_key] = _check(driver.cuModuleLoadData(kernel.compiled.cubin))
        fn = _check(driver.cuModuleGetFunction(_modules[mod_key], kernel.name.encode()))
        _functions[key] = fn
    return fn


def _launch(kernel: Kernel, grid, block, shared: int, values: list) -> None:
    import torch
    from cuda.bindings import driver

    device = torch.cuda.current_device()
    fn = _function(kernel, device)
    if shared > 48 * 1024:  # above the default per-block limit a kernel must opt in
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(driver.cuFuncSetAttribute(fn, attr, shared))
    params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
    stream = driver.CUstream(torch.cuda.current_stream(device).cuda_stream)
    _check(driver.cuLaunchKernel(fn, *grid, *block, shared, stream, ctypes.addressof(params) if values else None, 0))
