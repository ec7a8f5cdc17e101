"""kz_cuda: the CUDA C++ kernel languages for kzcore: ``cuda`` (NVRTC-compiled kernels) and
``cuda-inline`` (KernelBench's ``torch.utils.cpp_extension.load_inline`` modules, unchanged; see inline.py).

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
from kzcore import Language, PromptSection, hookimpl

NAME = "cuda"
INLINE = "cuda-inline"

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
    register(
        Language(
            name=INLINE,
            description="CUDA C++ built with torch.utils.cpp_extension.load_inline (KernelBench format; nvcc, "
            "disk-cached, prebuilt on CPU processes)",
            fence_tags=("python", "py", "cuda"),
            needs_gpu=True,
        )
    )


@hookimpl
def kz_static_check(language, source):
    if language == INLINE:
        from kz_cuda.inline_static import check_source as check_inline

        return check_inline(source)
    if language != NAME:
        return None
    from kz_cuda.static import check_source

    return check_source(source)


@hookimpl
def kz_load_candidate(language, path, device):
    if language == INLINE:
        from kz_cuda.inline import load_module as load_inline_module

        return load_inline_module(path, device)
    if language != NAME:
        return None
    from kz_cuda.runtime import load_module

    return load_module(path, device)


@hookimpl
def kz_instrument_candidate(language, module):
    # cuda-inline: launches happen inside the compiled extension, out of Python's sight, so there is no
    # count to give (None); a made-up one would be worse than none.
    if language != NAME:
        return None
    from kz_cuda.runtime import instrument

    return instrument(module)


@hookimpl
def kz_kernel_names(language, module):
    # both dialects: the __global__ kernels defined in the module's strings (nvcc's traced names contain them)
    if language not in (NAME, INLINE):
        return None
    from kz_cuda.runtime import kernel_names

    return kernel_names(module)


@hookimpl
def kz_worker_started(device):
    from kz_cuda.inline import warm_up as warm_up_inline
    from kz_cuda.runtime import warm_up

    warm_up(device)
    warm_up_inline(device)


@hookimpl
def kz_prepare_candidates(language, sources, config):
    if language != INLINE:
        return None
    from kz_cuda.prebuild import prepare

    return prepare(sources, config.device)


@hookimpl
def kz_prompt_sections(language, problem, template):
    if language == INLINE:
        from kz_cuda.prompt import INLINE_EXAMPLE, INLINE_RULES

        return [
            PromptSection("CUDA (load_inline) rules", INLINE_RULES, order=20),
            PromptSection("Example", INLINE_EXAMPLE, order=40),
        ]
    if language != NAME:
        return None
    from kz_cuda.prompt import EXAMPLE, LAUNCHER_API, RULES

    return [
        PromptSection("CUDA rules", RULES, order=20),
        PromptSection("Launcher API (kz_cuda)", f"```python\n{LAUNCHER_API}\n```", order=30),
        PromptSection("Example", EXAMPLE, order=40),
    ]
