"""kz_cuda: the CUDA C++ kernel language for kzcore (dialect ``cuda``: NVRTC-compiled kernels).

A candidate is a Python module with ``class ModelNew`` whose kernels are CUDA C++ source strings
(``extern "C" __global__ void ...``), compiled with NVRTC and launched on torch tensors through the small
launcher API this package exports (``load_kernels`` and the typed scalars ``i32`` ... ``f64``; see
docs/cuda.md). NVRTC needs no GPU, so compile errors are verdicts on CPU-only machines; running a kernel
needs one. Importing this package imports neither torch nor cuda-python: the ``kz`` process loads it to check
and prompt, and only workers compile and run.
"""

from __future__ import annotations

from kz_cuda.launch import load_kernels
from kz_cuda.scalars import f32, f64, i32, i64, u32, u64
from kzcore import hookimpl
from kzcore.types import Language, PromptSection

NAME = "cuda"

__all__ = ["load_kernels", "i32", "u32", "i64", "u64", "f32", "f64"]


@hookimpl
def kz_register_languages(register):
    register(
        Language(
            name=NAME,
            description='CUDA C++ kernels (extern "C" __global__) in a Python module, compiled with NVRTC',
            fence_tags=("python", "py", "cuda"),
            needs_gpu=True,
        )
    )


@hookimpl
def kz_static_check(language, source):
    if language != NAME:
        return None
    from kz_cuda.static import check_source

    return check_source(source)


@hookimpl
def kz_load_candidate(language, path, device):
    if language != NAME:
        return None
    from kz_cuda.runtime import load_module

    return load_module(path, device)


@hookimpl
def kz_instrument_candidate(language, module):
    if language != NAME:
        return None
    from kz_cuda.runtime import instrument

    return instrument(module)


@hookimpl
def kz_worker_started(device):
    from kz_cuda.runtime import warm_up

    warm_up(device)


@hookimpl
def kz_prompt_sections(language, problem, template):
    if language != NAME:
        return None
    from kz_cuda.prompt import EXAMPLE, LAUNCHER_API, RULES

    return [
        PromptSection("CUDA rules", RULES, order=20),
        PromptSection("Launcher API (kz_cuda)", f"```python\n{LAUNCHER_API}\n```", order=30),
        PromptSection("Example", EXAMPLE, order=40),
    ]
