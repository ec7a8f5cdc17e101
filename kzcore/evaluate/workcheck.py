"""The GPU-work stage: on a GPU, one forward is profiled and the candidate's own kernels must have done most
of its GPU work. Neighbours: `stage` (the state it takes), `gpuwork` (the profiler and the attribution of
kernels)."""

from __future__ import annotations

from kzcore.errors import TimedCheckFailed
from kzcore.evaluate import gpuwork
from kzcore.evaluate.stage import EvaluationState, Verdict, candidate_error, is_fatal_device_error
from kzcore.evaluate.tensors import clone_inputs
from kzcore.evaluate.timing import guarded_calls
from kzcore.types import Status


def gpu_work(state: EvaluationState, candidate_mod, candidate, inputs, launches=None) -> None:
    """On a GPU, profile one forward: it must leave no work running on a stream it did not join (the timer
    measures the calling stream), and the candidate's own kernels must do most of its GPU work."""
    if state.device != "cuda" or not state.config.gpu_work_check:
        return
    names = state.pm.hook.kz_kernel_names(language=state.language, module=candidate_mod)
    with state.clock("gpu_work"):
        args = clone_inputs(inputs)
        before = launches() if launches is not None else None
        try:
            forward = guarded_calls(state, lambda: state.forward(state.language, candidate, args), "the profiled call")
            events = gpuwork.profile_forward(forward)
        except TimedCheckFailed as exc:
            raise Verdict(Status.HACK_SUSPECTED, str(exc)) from None
        except Exception as exc:  # the forward ran cleanly in every trial: this is the profiler's failure
            state.poisoned = is_fatal_device_error(exc)
            if state.poisoned:
                raise Verdict(Status.RUNTIME_ERROR, "gpu-work check: " + candidate_error(exc, None)) from None
            state.notes.append(f"gpu-work check skipped: {type(exc).__name__}: {exc}"[:200])
            return
    events, marker = gpuwork.split_marker(events)
    if marker is None:
        state.note_once("side-stream check skipped: the profile has no marker kernel")
    message = gpuwork.side_stream_verdict(events, marker)
    if message:
        raise Verdict(Status.HACK_SUSPECTED, message)
    if names is None:
        return
    counted = launches() - before if before is not None else None
    message = gpuwork.classify([(e.name, e.us) for e in events], names, counted).verdict()
    if message:
        raise Verdict(Status.HACK_SUSPECTED, message)
