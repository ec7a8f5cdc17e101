"""The evaluation pipeline for one candidate, run inside a worker process:
extract → static check → load → construct → correctness trials → timing → EvalResult.

Neighbours: `executors.worker` calls `evaluate_job`; plugins supply the language-specific steps through
the kernel-pipeline hooks; `guard` and `memory` hold the runtime defences. Each stage is a function in its own
module (`loading`, `trials`, `second_shape`, `workcheck`, `timing`) taking the job's `stage.EvaluationState`;
`Evaluation.run` calls them in order."""

from __future__ import annotations

from pathlib import Path

import attrs

from kzcore.builtins import timing as builtin_timing
from kzcore.evaluate import gpuwork, guard, integrity, memory
from kzcore.evaluate.loading import (
    construct,
    extract_source,
    load_candidate,
    load_problem,
    precompile,
    precompile_inputs,
    static_check,
)
from kzcore.evaluate.second_shape import second_shape
from kzcore.evaluate.stage import (  # noqa: F401 (re-exported)
    MESSAGE_LIMIT,
    EvaluationState,
    StageClock,
    Verdict,
    candidate_error,
    is_fatal_device_error,
)
from kzcore.evaluate.tensors import as_list, changed_inputs, clone_inputs, refill  # noqa: F401 (re-exported)
from kzcore.evaluate.timing import REVERIFY_TRIALS, TIMING_FIELDS, reverify, timing_inputs, timing_pass  # noqa: F401
from kzcore.evaluate.trials import correctness, draw_salt
from kzcore.evaluate.workcheck import gpu_work
from kzcore.types import EvalJob, EvalResult, Status, as_launch_counter


def check_tampering(state: EvaluationState, watch, stage: str, values: bool = False) -> None:
    """``hack_suspected`` if the candidate's code changed what the tamper watch covers (the worker is poisoned);
    ``values``: also the reference's parameters' values (device work: the caller holds the GPU lock)."""
    with state.clock("tamper"):
        findings = watch.findings() + (watch.values_changed() if values else [])
    if findings:
        state.poisoned = True
        raise Verdict(Status.HACK_SUSPECTED, f"after {stage}, the candidate's code " + "; ".join(findings))


class Evaluation:
    """One job's evaluation: `run()` calls the stages in order on one `EvaluationState` and returns
    (EvalResult, worker_poisoned)."""

    def __init__(self, job: EvalJob, pm, workdir: Path, device: str, gpu_lock=None, lock_index: int = 0):
        self.state = EvaluationState(job, pm, workdir, device, gpu_lock, lock_index)

    # -- driver ----------------------------------------------------------------------------------
    def run(self) -> tuple[EvalResult, bool]:
        state = self.state
        status, message = Status.CORRECT, ""
        launches = None
        watch = state.watch = integrity.Watch(state.languages(), pm=state.pm)  # taken before any candidate code runs
        try:
            source = extract_source(state)
            static_check(state, source)
            candidate_mod = load_candidate(state, source)
            check_tampering(state, watch, "its import")
            launches = as_launch_counter(
                state.pm.hook.kz_instrument_candidate(language=state.language, module=candidate_mod)
            )
            with state.clock("load_problem"):
                problem_mod = load_problem(state)
            with state.shared_gpu("construct"):
                reference, candidate = construct(state, problem_mod, candidate_mod)
                # the candidate is built: from here on, the trials' inputs follow a secret it never saw
                state.salt = state.fields["input_salt"] = draw_salt(state.config)
                warm_inputs = precompile_inputs(state, problem_mod)
            precompile(state, candidate, warm_inputs)  # outside the lock: compiling uses no GPU
            del warm_inputs
            # before the first trial draws its inputs: a default dtype or autocast switched on in the constructor
            # and off again in the first forward would change what every check after it compares
            check_tampering(state, watch, "its construction")
            correctness(state, problem_mod, reference, candidate, launches)  # a shared hold per trial
            with state.shared_gpu("trials"):
                check_tampering(state, watch, "the correctness trials", values=True)
            second_shape(state, candidate_mod, launches, index=state.config.trials)
            check_tampering(state, watch, "the second shape's trial")  # no GPU work: outside the hold
            with state.shared_gpu("inputs"):
                inputs = timing_inputs(state, problem_mod)
                gpu_work(state, candidate_mod, candidate, inputs[1], launches)
            with state.exclusive_gpu():
                timing_pass(state, problem_mod, reference, candidate, inputs)
                check_tampering(state, watch, "timing", values=True)
            reverify(state, problem_mod, candidate_mod, reference, candidate, launches, inputs)
            if state.fields.get("reverified"):
                with state.shared_gpu("reverify"):
                    check_tampering(state, watch, "re-verification", values=True)
        except Verdict as verdict:
            status, message = verdict.status, verdict.message
            state.fields.update(verdict.fields)
        except Exception as exc:  # the harness or the problem itself failed: still a result, never a crash
            state.poisoned = is_fatal_device_error(exc)
            status, message = Status.RUNTIME_ERROR, "evaluation failed: " + candidate_error(exc, state.candidate_file)
        finally:
            if state.candidate_file is not None:
                state.candidate_file.unlink(missing_ok=True)
            if watch.tampered():
                state.poisoned = True  # whatever the verdict, a tampered process evaluates nothing more
        return self.result(status, message, launches), state.poisoned

    def result(self, status: Status, message: str, launches) -> EvalResult:
        state = self.state
        try:
            n_launches = launches() if launches is not None else 0
        except Exception:
            n_launches = 0
        base = state.job.result(
            status, message, launches=n_launches, stages=dict(state.clock.seconds), device=state.device
        )
        return attrs.evolve(base, **state.fields)


def warm_up(device: str, pm=None) -> None:
    """Pay, once per worker before its first job, the one-time costs the first evaluation would otherwise
    carry: the imports the integrity baseline and the op guard need (``torch._dynamo``, seconds where
    bytecode is not cached), and on a GPU the profiler, the cache poisoning and the output check. ``pm``:
    the worker's plugins, whose languages' packages the baseline covers."""
    import torch

    from kzcore.plugins import languages

    integrity.prepare(languages(pm).items.values() if pm is not None else ())
    with guard.recorder(record=True):
        torch.ones(2).add(1)
    if device != "cuda":
        return
    gpuwork.profile_forward(lambda: torch.ones(1024, device="cuda").add(1))
    builtin_timing.spin_cycles_per_us()
    memory.poison_free_cache()
    from kzcore.builtins.outputs import compare
    from kzcore.types import EvalConfig

    y = torch.ones(4, device="cuda")
    compare([y], [y.clone()], EvalConfig())
    torch.cuda.synchronize()


def evaluate_job(
    job: EvalJob, pm, workdir: Path, device: str, gpu_lock=None, lock_index: int = 0
) -> tuple[EvalResult, bool]:
    """Evaluate one job in this (worker) process. Returns the result and whether the process is poisoned.
    ``gpu_lock`` (a DeviceLock shared with the other workers of this GPU) keeps timing exclusive."""
    return Evaluation(job, pm, workdir, device, gpu_lock, lock_index).run()
