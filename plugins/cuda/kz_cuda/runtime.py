"""Worker-side CUDA support: loading a candidate (every kernel string compiled before and after import, so
compile errors are verdicts even on CPU-only machines), counting its launches, warming NVRTC up."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import attrs

from kz_cuda.compile import compile_cuda
from kzcore import LaunchCounter, import_module_from_file

KERNEL_DEFINITION = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^()]*\)\s*)?void\s+([A-Za-z_]\w*)\s*\(")


@attrs.frozen
class KernelString:
    text: str
    label: str  # the variable it is assigned to, else "string at line N"
    first_line: int  # the module line of the string's first line (1 when unknown)
    mapped: bool  # whether first_line maps string lines to module lines one for one


def is_kernel_source(text: str) -> bool:
    """A string that defines at least one ``__global__`` kernel."""
    return bool(KERNEL_DEFINITION.search(text))


def kernel_names(module) -> list[str]:
    """Every ``__global__`` kernel name the candidate's source defines (a profiler traces an ``extern "C"``
    kernel under its own name and a C++ one under a mangled name that contains it)."""
    path = getattr(module, "__file__", None)
    if not path:
        return []
    return sorted({m.group(1) for m in KERNEL_DEFINITION.finditer(Path(path).read_text())})


def kernel_strings(source: str) -> list[KernelString]:
    """String literals in ``source`` that define kernels, with where they start. A literal's lines map to
    module lines when it spans exactly as many source lines as it has (a triple-quoted block; not an
    implicit concatenation of one-line pieces)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if isinstance(targets[0], ast.Name):
                names[id(node.value)] = targets[0].id
    found, seen = [], set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or not is_kernel_source(node.value):
            continue
        if node.value in seen:
            continue
        seen.add(node.value)
        mapped = node.end_lineno - node.lineno == node.value.count("\n")
        label = names.get(id(node), f"string at line {node.lineno}")
        found.append(KernelString(node.value, label, node.lineno if mapped else 1, mapped))
    return found


def compile_strings(strings: list[KernelString], arch: str) -> None:
    for ks in strings:
        origin = "line numbers are lines of your Python module" if ks.mapped else f"lines counted within {ks.label}"
        compile_cuda(ks.text, arch=arch, label=ks.label, first_line=ks.first_line, line_origin=origin)


def load_module(path: Path, device: str):
    """Compile every kernel string of the candidate for this device's architecture, import it, then compile
    any kernel string its import built at module level (cache hits for the literal ones). On a CPU-only
    machine this is all that can happen: launching raises GPURequiredError."""
    from kz_cuda.launch import arch_for_device, set_execution_device

    set_execution_device(device)
    arch = arch_for_device(device)
    compile_strings(kernel_strings(path.read_text()), arch)
    module = import_module_from_file(path, path.stem)
    built = [
        KernelString(v, k, 1, False) for k, v in vars(module).items() if isinstance(v, str) and is_kernel_source(v)
    ]
    compile_strings(built, arch)
    return module


def instrument(module):
    """Launches so far of kernels that ``module`` loaded (``load_kernels`` records its caller's module)."""
    from kz_cuda.launch import launches_of

    name = module.__name__
    base = launches_of(name)
    return LaunchCounter(lambda: launches_of(name) - base)  # counting is part of the launcher: nothing to take off


WARMUP_SOURCE = r"""extern "C" __global__ void kz_warmup(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""


def warm_up(device: str) -> None:
    """Load NVRTC and compile a tiny kernel; on a GPU also load and launch it, so the driver bindings and the
    module loader are ready before the first candidate's deadline starts. Every worker calls this, whatever
    language it will evaluate, so a failure here is reported on stderr (the worker log) and does not stop the
    worker: a cuda candidate then meets the same error itself, and other languages are unaffected."""
    try:
        _warm_up(device)
    except Exception as exc:  # warming up is an optimisation; the error resurfaces per candidate
        print(f"kz_cuda: warm-up on {device} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def _warm_up(device: str) -> None:
    from kz_cuda.launch import arch_for_device, load_kernels, set_execution_device
    from kz_cuda.scalars import i32

    set_execution_device(device)
    compile_cuda(WARMUP_SOURCE, arch=arch_for_device(device), label="warm-up")
    if device != "cuda":
        return
    import torch

    x = torch.ones(256, device="cuda")
    y = torch.empty_like(x)
    load_kernels(WARMUP_SOURCE)["kz_warmup"](grid=(1,), block=(256,), args=(x, y, i32(256)))
    torch.cuda.synchronize()
    if not torch.equal(x, y):
        raise RuntimeError("the warm-up kernel ran but did not copy its input")
