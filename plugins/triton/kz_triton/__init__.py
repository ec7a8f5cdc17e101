"""kz_triton: the Triton kernel language for kzcore (KernelBench's Triton solution format).

A candidate is a Python module with ``class ModelNew`` and at least one ``@triton.jit`` kernel that
``forward`` launches. CPU workers run kernels in Triton's interpreter (``TRITON_INTERPRET=1``, which this
language asks for in their environment). This module never imports triton at import time: the ``kz`` process
loads it to check and prompt, and only workers compile and run.
"""

from __future__ import annotations

import os
from pathlib import Path

from kz_triton.static import check_source
from kzcore import Language, PromptSection, hookimpl


class Triton(Language):
    name = "triton"
    description = "Triton kernels in a Python module (KernelBench format); interpreter on CPU"
    fence_tags = ("python", "py", "triton")
    tracked_packages = ("triton",)
    kernel_namespaces = ("tl", "triton")  # tl.sum(...) is Triton's, not a tensor method

    def static_check(self, source):
        return check_source(source)

    def prompt_sections(self, problem, template):
        from kz_triton.prompt import EXAMPLE, RULES

        return [PromptSection("Triton rules", RULES, order=20), PromptSection("Example", EXAMPLE, order=40)]

    def variant_solution(self, member):
        from kz_triton.variants import variant_solution

        return variant_solution(member)

    def worker_environment(self, device):
        # explicit both ways: a TRITON_INTERPRET=1 left in the parent's environment must not reach GPU workers
        return {"TRITON_INTERPRET": "1" if device == "cpu" else "0"}

    def writable_caches(self):
        paths = [Path.home() / ".triton"]
        if os.environ.get("TRITON_HOME"):
            paths.append(Path(os.environ["TRITON_HOME"]) / ".triton")
        if os.environ.get("TRITON_CACHE_DIR"):
            paths.append(Path(os.environ["TRITON_CACHE_DIR"]))
        return paths

    def worker_started(self, device):
        from kz_triton import check
        from kz_triton.runtime import warm_up

        warm_up(device)
        check.warm(device)  # before any candidate: the output check is never compiled after one ran

    def load_candidate(self, path, device):
        from kz_triton.runtime import load_module

        return load_module(path)

    def instrument(self, module):
        from kz_triton.runtime import instrument

        return instrument(module)

    def kernel_names(self, module):
        from kz_triton.runtime import kernel_names

        return kernel_names(module)

    def precompile(self, model, inputs):
        from kz_triton.runtime import precompile

        return precompile(model, inputs)


TRITON = Triton()


@hookimpl
def kz_register_languages(register):
    register(TRITON)


@hookimpl(tryfirst=True)
def kz_check_outputs(expected, actual, config):
    """The core's output check with its elementwise pass done by one Triton kernel (`kz_triton.check`) on a GPU
    where this worker compiled it; for every candidate's language, since the check is the evaluator's. None
    (the core's own check answers) where the kernel was not compiled: a CPU worker, a process that is not a
    worker."""
    from kz_triton import check

    if not check.ready():
        return None
    from kzcore import compare_outputs

    return compare_outputs(expected, actual, config, summarise=check.summarise)


kz_check_outputs.elementwise = True  # the core's elementwise rule: the timed pairs' spot checks apply to it
