"""The evaluation pipeline for one candidate, run inside a worker process:
extract → static check → load → construct → correctness trials → timing → EvalResult.

Neighbours: `executors.worker` calls `evaluate_job`; plugins supply the language-specific steps through
the kernel-pipeline hooks; `guard` and `memory` hold the runtime defences. Each stage lives in its own
module (`loading`, `trials`, `second_shape`, `workcheck`, `timing`, on `stage`); `Evaluation` runs them."""

from __future__ import annotations

from pathlib import Path

import attrs

from kzcore.builtins import timing as builtin_timing
from kzcore.evaluate import gpuwork, guard, integrity, memory
from kzcore.evaluate.loading import Loading
from kzcore.evaluate.second_shape import SecondShape
from kzcore.evaluate.stage import (  # noqa: F401 (re-exported)
    MESSAGE_LIMIT,
    StageClock,
    Verdict,
    candidate_error,
    is_fatal_device_error,
)
from kzcore.evaluate.tensors import as_list, changed_inputs, clone_inputs, refill  # noqa: F401 (re-exported)
from kzcore.evaluate.timing import REVERIFY_TRIALS, TIMING_FIELDS, Timing  # noqa: F401 (re-exported)
from kzcore.evaluate.trials import Trials
from kzcore.evaluate.workcheck import GpuWorkCheck
from kzcore.types import EvalJob, EvalResult, Status, as_launch_counter


class Evaluation(Loading, Trials, SecondShape, GpuWorkCheck, Timing):
    """One job's state across the stages; `run()` returns (EvalResult, worker_poisoned)."""

    def tampering(self, watch, stage: str) -> None:
        findings = watch.findings()
        if findings:
            self.poisoned = True
            raise Verdict(Status.HACK_SUSPECTED, f"after {stage}, the candidate's code " + "; ".join(findings))

    # -- driver ----------------------------------------------------------------------------------
    def run(self) -> tuple[EvalResult, bool]:
        status, message = Status.CORRECT, ""
        launches = None
        watch = integrity.Watch(self.languages())  # taken before any candidate code runs
        try:
            source = self.source()
            self.static_check(source)
            candidate_mod = self.load_candidate(source)
            self.tampering(watch, "its import")
            launches = as_launch_counter(
                self.pm.hook.kz_instrument_candidate(language=self.language, module=candidate_mod)
            )
            with self.clock("load_problem"):
                problem_mod = self.load_problem()
            with self.shared_gpu():
                reference, candidate = self.construct(problem_mod, candidate_mod)
                warm_inputs = self.precompile_inputs(problem_mod)
            self.precompile(candidate, warm_inputs)  # outside the lock: compiling uses no GPU
            del warm_inputs
            with self.shared_gpu():
                self.correctness(problem_mod, reference, candidate, launches)
            self.second_shape(candidate_mod, launches, index=self.config.trials)
            with self.shared_gpu():
                self.tampering(watch, "the correctness trials")
                inputs = self.timing_inputs(problem_mod)
                self.gpu_work(candidate_mod, candidate, inputs[1], launches)
            with self.exclusive_gpu():
                self.timing(problem_mod, reference, candidate, inputs)
            self.reverify(problem_mod, candidate_mod, reference, candidate, launches, inputs)
            self.tampering(watch, "timing")
        except Verdict as verdict:
            status, message = verdict.status, verdict.message
            self.fields.update(verdict.fields)
        except Exception as exc:  # the harness or the problem itself failed: still a result, never a crash
            self.poisoned = is_fatal_device_error(exc)
            status, message = Status.RUNTIME_ERROR, "evaluation failed: " + candidate_error(exc, self.candidate_file)
        finally:
            if self.candidate_file is not None:
                self.candidate_file.unlink(missing_ok=True)
            if watch.tampered():
                self.poisoned = True  # whatever the verdict, a tampered process evaluates nothing more
        return self.result(status, message, launches), self.poisoned

    def result(self, status: Status, message: str, launches) -> EvalResult:
        try:
            n_launches = launches() if launches is not None else 0
        except Exception:
            n_launches = 0
        base = self.job.result(
            status, message, launches=n_launches, stages=dict(self.clock.seconds), device=self.device
        )
        return attrs.evolve(base, **self.fields)


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
