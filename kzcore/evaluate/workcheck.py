"""The GPU-work stage: on a GPU, one forward is profiled and the candidate's own kernels must have done most
of its GPU work. Neighbour: `gpuwork` (the profiler and the attribution of kernels)."""

from __future__ import annotations

from kzcore.evaluate import gpuwork
from kzcore.evaluate.stage import EvaluationState, Verdict, candidate_error, is_fatal_device_error
from kzcore.evaluate.tensors import clone_inputs
from kzcore.types import Status


class GpuWorkCheck(EvaluationState):
    def gpu_work(self, candidate_mod, candidate, inputs) -> None:
        """On a GPU, profile one forward: the candidate's own kernels must do most of its GPU work."""
        if self.device != "cuda" or not self.config.gpu_work_check:
            return
        names = self.pm.hook.kz_kernel_names(language=self.language, module=candidate_mod)
        if names is None:
            return
        with self.clock("gpu_work"):
            args = clone_inputs(inputs)
            try:
                kernels = gpuwork.profile_kernels(lambda: self.forward(self.language, candidate, args))
            except Exception as exc:  # the forward ran cleanly in every trial: this is the profiler's failure
                self.poisoned = is_fatal_device_error(exc)
                if self.poisoned:
                    raise Verdict(Status.RUNTIME_ERROR, "gpu-work check: " + candidate_error(exc, None)) from None
                self.notes.append(f"gpu-work check skipped: {type(exc).__name__}: {exc}"[:200])
                return
        work = gpuwork.classify(kernels, names)
        message = work.verdict()
        if message:
            raise Verdict(Status.HACK_SUSPECTED, message)
