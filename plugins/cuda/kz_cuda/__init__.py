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

__all__ = ["load_kernels", "i32", "u32", "i64", "u64", "f32", "f64"]


class _CudaLanguage(Language):
    """What both dialects share: GPU-only execution, the cuda-inline build cache, kernel names."""

    fence_tags = ("python", "py", "cuda")
    needs_gpu = True
    tracked_packages = ("cupy-cuda12x", "cupy-cuda13x", "cuda-python")

    def writable_caches(self):
        # the cuda-inline builds (kz_cuda.inline), shared with the prebuild processes; the driver's and CuPy's
        # caches are each worker's own, under its scratch directory (kzcore.executors.caches.PRIVATE_CACHES)
        from kz_cuda.inline import cache_root

        return [cache_root()]

    def kernel_names(self, module):
        # both dialects: the __global__ kernels defined in the module's strings (nvcc's traced names contain them)
        from kz_cuda.runtime import kernel_names

        return kernel_names(module)


class Cuda(_CudaLanguage):
    name = "cuda"
    description = 'CUDA C++ kernels (extern "C" __global__) in a Python module, compiled with NVRTC'

    def static_check(self, source):
        from kz_cuda.static import check_source

        return check_source(source)

    def prompt_sections(self, problem, template):
        from kz_cuda.prompt import EXAMPLE, LAUNCHER_API, RULES

        return [
            PromptSection("CUDA rules", RULES, order=20),
            PromptSection("Launcher API (kz_cuda)", f"```python\n{LAUNCHER_API}\n```", order=30),
            PromptSection("Example", EXAMPLE, order=40),
        ]

    def variant_solution(self, member):
        from kz_cuda.variants import variant_solution

        return variant_solution(member)

    def worker_started(self, device):
        from kz_cuda.runtime import warm_up

        warm_up(device)

    def load_candidate(self, path, device):
        from kz_cuda.runtime import load_module

        return load_module(path, device)

    def instrument(self, module):
        from kz_cuda.runtime import instrument

        return instrument(module)


class CudaInline(_CudaLanguage):
    name = "cuda-inline"
    description = (
        "CUDA C++ built with torch.utils.cpp_extension.load_inline (KernelBench format; nvcc, "
        "disk-cached, prebuilt on CPU processes)"
    )

    def static_check(self, source):
        from kz_cuda.inline_static import check_source

        return check_source(source)

    def prepare_candidates(self, sources, config):
        from kz_cuda.prebuild import prepare

        return prepare(sources, config.device)

    def prompt_sections(self, problem, template):
        from kz_cuda.prompt import INLINE_EXAMPLE, INLINE_RULES

        return [
            PromptSection("CUDA (load_inline) rules", INLINE_RULES, order=20),
            PromptSection("Example", INLINE_EXAMPLE, order=40),
        ]

    def worker_started(self, device):
        from kz_cuda.inline import warm_up

        warm_up(device)

    def load_candidate(self, path, device):
        from kz_cuda.inline import load_module

        return load_module(path, device)

    # no instrument: launches happen inside the compiled extension, out of Python's sight, so there is no
    # count to give (None); a made-up one would be worse than none


CUDA, CUDA_INLINE = Cuda(), CudaInline()


@hookimpl
def kz_register_languages(register):
    register(CUDA)
    register(CUDA_INLINE)
