"""kz_triton: the Triton kernel language for kzcore (KernelBench's Triton solution format).

A candidate is a Python module with ``class ModelNew`` and at least one ``@triton.jit`` kernel that
``forward`` launches. Under ``TRITON_INTERPRET=1`` (set by the evaluator on CPU-only machines) kernels run
in Triton's interpreter. This module never imports triton at import time: the ``kz`` process loads it to
check and prompt, and only workers compile and run.
"""

from __future__ import annotations

from kz_triton.static import check_source
from kzcore import Language, PromptSection, hookimpl

NAME = "triton"


@hookimpl
def kz_register_languages(register):
    register(
        Language(
            name=NAME,
            description="Triton kernels in a Python module (KernelBench format); interpreter on CPU",
            fence_tags=("python", "py", "triton"),
        )
    )


@hookimpl
def kz_static_check(language, source):
    if language != NAME:
        return None
    return check_source(source)


@hookimpl
def kz_load_candidate(language, path, device):
    if language != NAME:
        return None
    from kz_triton.runtime import load_module

    return load_module(path)


@hookimpl
def kz_instrument_candidate(language, module):
    if language != NAME:
        return None
    from kz_triton.runtime import instrument

    return instrument(module)


@hookimpl
def kz_kernel_names(language, module):
    if language != NAME:
        return None
    from kz_triton.runtime import kernel_names

    return kernel_names(module)


@hookimpl
def kz_precompile(language, model, inputs):
    if language != NAME:
        return None
    from kz_triton.runtime import precompile

    return precompile(model, inputs)


@hookimpl
def kz_worker_started(device):
    from kz_triton.runtime import warm_up

    warm_up(device)


@hookimpl
def kz_prompt_sections(language, problem, template):
    if language != NAME:
        return None
    from kz_triton.prompt import EXAMPLE, RULES

    return [PromptSection("Triton rules", RULES, order=20), PromptSection("Example", EXAMPLE, order=40)]
