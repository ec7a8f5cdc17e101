"""The evaluation pipeline for one candidate, run inside a worker process:
extract → static check → load → construct → correctness trials → timing → EvalResult.

Neighbours: `executors.worker` calls `evaluate_job`; plugins supply the language-specific steps through
the kernel-pipeline hooks; `guard` and `memory` hold the runtime defences."""

from __future__ import annotations

import contextlib
import itertools
import time
import traceback
from pathlib import Path

import attrs

from kzcore.errors import CompileError
from kzcore.evaluate import guard, memory
from kzcore.problems import apply_size_profile, import_module_from_file
from kzcore.types import EvalJob, EvalResult, Status

MESSAGE_LIMIT = 1500
_counter = itertools.count()


class Verdict(Exception):
    """Ends the pipeline early with a status and a message for the model."""

    def __init__(self, status: Status, message: str, **fields):
        super().__init__(message)
        self.status, self.message, self.fields = status, message, fields


class StageClock:
    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, stage: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = round(self.seconds.get(stage, 0.0) + time.perf_counter() - t0, 6)


def candidate_error(exc: BaseException, candidate_file: Path | None) -> str:
    """A short, model-actionable description: exception, message, and the candidate's line if any."""
    text = f"{type(exc).__name__}: {exc}".strip()
    if candidate_file is not None:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(candidate_file)]
        if frames:
            f = frames[-1]
            text += f"\n  at line {f.lineno} in {f.name}: {(f.line or '').strip()}"
    return text[:MESSAGE_LIMIT]


def is_fatal_device_error(exc: BaseException) -> bool:
    """CUDA errors after which the worker must be replaced (a context that saw an illegal access is
    unusable for good)."""
    text = f"{type(exc).__name__} {exc}"
    return any(
        s in text
        for s in (
            "illegal memory access",
            "CUDA error",
            "AcceleratorError",
            "unspecified launch failure",
            "misaligned address",
            "out of memory",  # OOM: start clean rather than limp on a fragmented cache
        )
    )


def as_list(outputs) -> list:
    if isinstance(outputs, (tuple, list)):
        return list(outputs)
    return [outputs]


def clone_inputs(inputs: list) -> list:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def changed_inputs(before: list, after: list) -> list[int]:
    import torch

    return [
        i
        for i, (b, a) in enumerate(zip(before, after))
        if isinstance(b, torch.Tensor) and not torch.equal(torch.nan_to_num(b), torch.nan_to_num(a))
    ]


class Evaluation:
    """One job's state across the stages; `run()` returns (EvalResult, worker_poisoned)."""

    def __init__(self, job: EvalJob, pm, workdir: Path, device: str, gpu_lock=None, lock_index: int = 0):
        self.job, self.pm, self.workdir, self.device = job, pm, workdir, device
        self.gpu_lock, self.lock_index = gpu_lock, lock_index
        self.config = job.config
        self.language = job.candidate.language
        self.clock = StageClock()
        self.fields: dict = {}
        self.candidate_file: Path | None = None
        self.poisoned = False
        self.uid = next(_counter)

    # -- helpers ---------------------------------------------------------------------------------
    def seed(self, value: int) -> None:
        import torch

        torch.manual_seed(value)

    def device_ctx(self):
        import torch

        return torch.device(self.device)

    def sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def shared_gpu(self):
        """Held while this worker uses the GPU for anything but timing (other workers may too)."""
        return self.gpu_lock.shared(self.lock_index) if self.gpu_lock else contextlib.nullcontext()

    def exclusive_gpu(self):
        """Held while timing: no other worker on this GPU runs anything."""
        return self.gpu_lock.exclusive(self.lock_index) if self.gpu_lock else contextlib.nullcontext()

    def forward(self, language: str, model, inputs):
        return self.pm.hook.kz_run_forward(language=language, model=model, inputs=inputs)

    # -- stages ----------------------------------------------------------------------------------
    def source(self) -> str:
        cand = self.job.candidate
        if cand.source is not None:
            return cand.source
        with self.clock("extract"):
            source = self.pm.hook.kz_extract_source(language=self.language, completion=cand.completion)
        if not source:
            raise Verdict(Status.FORMAT_ERROR, "no code block defining `class ModelNew` found in the completion")
        return source

    def static_check(self, source: str) -> None:
        with self.clock("static"):
            violations = self.pm.hook.kz_static_check(language=self.language, source=source)
        if violations:
            raise Verdict(Status.STATIC_CHECK_FAILED, "static check failed:\n- " + "\n- ".join(violations))

    def load_candidate(self, source: str):
        self.candidate_file = self.workdir / f"kz_candidate_{self.uid}.py"
        self.candidate_file.write_text(source)
        with self.clock("compile"):
            try:
                module = self.pm.hook.kz_load_candidate(
                    language=self.language, path=self.candidate_file, device=self.device
                )
            except CompileError as exc:
                raise Verdict(Status.COMPILE_ERROR, exc.log[:MESSAGE_LIMIT]) from None
            except SyntaxError as exc:
                raise Verdict(Status.COMPILE_ERROR, f"SyntaxError: {exc.msg} (line {exc.lineno})") from None
            except Exception as exc:
                raise Verdict(
                    Status.COMPILE_ERROR, "importing the module failed: " + candidate_error(exc, self.candidate_file)
                ) from None
        if module is None:
            raise Verdict(Status.RUNTIME_ERROR, f"no plugin could load a {self.language!r} candidate")
        if not hasattr(module, "ModelNew"):
            raise Verdict(Status.FORMAT_ERROR, "the module defines no `ModelNew`")
        return module

    def load_problem(self):
        problem = self.job.problem
        path = Path(problem.path) if problem.path and Path(problem.path).is_file() else None
        if path is None:
            path = self.workdir / f"kz_problem_{self.uid}.py"
            path.write_text(problem.source)
        module = import_module_from_file(path, f"kz_problem_{self.uid}")
        size = self.config.size
        if size == "auto":
            size = "full" if self.device == "cuda" else "small"
        self.fields["size"] = apply_size_profile(module, size)
        return module

    def construct(self, problem_mod, candidate_mod):
        with self.clock("construct"):
            with self.device_ctx():
                self.seed(self.config.seed)
                init = list(problem_mod.get_init_inputs())
                self.seed(self.config.seed)
                reference = problem_mod.Model(*init)
                self.seed(self.config.seed)
                try:
                    candidate = candidate_mod.ModelNew(*clone_inputs(init))
                except Exception as exc:
                    raise Verdict(
                        Status.RUNTIME_ERROR,
                        "constructing ModelNew failed: " + candidate_error(exc, self.candidate_file),
                    ) from None
            self.sync()
        return reference, candidate

    def correctness(self, problem_mod, reference, candidate, launches) -> None:
        guarded = self.job_language().guard_torch_ops if self.job_language() else True
        worst_abs = worst_rel = 0.0
        for trial in range(self.config.trials):
            with self.clock("inputs"):
                with self.device_ctx():
                    self.seed(self.config.seed * 1000 + trial + 1)
                    pristine = list(problem_mod.get_inputs())
                cand_inputs = clone_inputs(pristine)
                if self.device == "cuda":
                    memory.poison_free_cache()
            with self.clock("candidate"):
                recorder = guard.recorder(record=guarded)
                try:
                    with recorder:
                        actual = as_list(self.forward(self.language, candidate, cand_inputs))
                    self.sync()
                except CompileError as exc:
                    raise Verdict(Status.COMPILE_ERROR, exc.log[:MESSAGE_LIMIT]) from None
                except Exception as exc:
                    self.poisoned = is_fatal_device_error(exc)
                    raise Verdict(
                        Status.RUNTIME_ERROR, f"trial {trial}: " + candidate_error(exc, self.candidate_file)
                    ) from None
            if recorder.forbidden:
                ops = ", ".join(f"aten.{op}" for op in recorder.forbidden[:8])
                raise Verdict(
                    Status.HACK_SUSPECTED, f"forward ran PyTorch compute operators outside its kernels: {ops}"
                )
            mutated = changed_inputs(pristine, cand_inputs)
            if mutated:
                raise Verdict(
                    Status.HACK_SUSPECTED, f"forward modified its input(s) {mutated}; inputs must be read-only"
                )
            if trial == 0 and launches is not None and launches() == 0:
                raise Verdict(
                    Status.HACK_SUSPECTED, f"forward launched none of the candidate's own {self.language} kernels"
                )
            with self.clock("reference"):
                expected = as_list(self.forward("reference", reference, pristine))
                self.sync()
            with self.clock("check"):
                check = self.pm.hook.kz_check_outputs(expected=expected, actual=actual, config=self.config)
            worst_abs, worst_rel = max(worst_abs, check.max_abs_err), max(worst_rel, check.max_rel_err)
            self.fields.update(max_abs_err=worst_abs, max_rel_err=worst_rel)
            if not check.ok:
                raise Verdict(Status.INCORRECT, f"trial {trial}: {check.message}")
            del actual, expected, pristine, cand_inputs

    def timing_inputs(self, problem_mod) -> tuple[list, list]:
        with self.device_ctx():
            self.seed(self.config.seed * 1000 + 999)
            inputs = list(problem_mod.get_inputs())
        return clone_inputs(inputs), clone_inputs(inputs)

    def timing(self, reference, candidate, inputs) -> None:
        ref_inputs, cand_inputs = inputs
        with self.clock("timing"):
            try:
                timing = self.pm.hook.kz_time_candidate(
                    device=self.device,
                    reference=lambda: self.forward("reference", reference, ref_inputs),
                    candidate=lambda: self.forward(self.language, candidate, cand_inputs),
                    config=self.config,
                )
            except Exception as exc:
                self.poisoned = is_fatal_device_error(exc)
                raise Verdict(
                    Status.RUNTIME_ERROR, "during timing: " + candidate_error(exc, self.candidate_file)
                ) from None
        self.fields.update(
            ref_ms=timing.ref_ms,
            cand_ms=timing.cand_ms,
            speedup=timing.speedup,
            ref_spread=timing.ref_spread,
            cand_spread=timing.cand_spread,
            timing_reps=timing.reps,
            timing_note=timing.note,
        )

    def job_language(self):
        from kzcore.plugins import languages

        return languages(self.pm).items.get(self.language)

    # -- driver ----------------------------------------------------------------------------------
    def run(self) -> tuple[EvalResult, bool]:
        status, message = Status.CORRECT, ""
        launches = None
        try:
            source = self.source()
            self.static_check(source)
            candidate_mod = self.load_candidate(source)
            launches = self.pm.hook.kz_instrument_candidate(language=self.language, module=candidate_mod)
            with self.clock("load_problem"):
                problem_mod = self.load_problem()
            with self.shared_gpu():
                reference, candidate = self.construct(problem_mod, candidate_mod)
                self.correctness(problem_mod, reference, candidate, launches)
                inputs = self.timing_inputs(problem_mod)
            with self.exclusive_gpu():
                self.timing(reference, candidate, inputs)
        except Verdict as verdict:
            status, message = verdict.status, verdict.message
            self.fields.update(verdict.fields)
        except Exception as exc:  # the harness or the problem itself failed: still a result, never a crash
            self.poisoned = is_fatal_device_error(exc)
            status, message = Status.RUNTIME_ERROR, "evaluation failed: " + candidate_error(exc, self.candidate_file)
        finally:
            if self.candidate_file is not None:
                self.candidate_file.unlink(missing_ok=True)
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


def evaluate_job(
    job: EvalJob, pm, workdir: Path, device: str, gpu_lock=None, lock_index: int = 0
) -> tuple[EvalResult, bool]:
    """Evaluate one job in this (worker) process. Returns the result and whether the process is poisoned.
    ``gpu_lock`` (a DeviceLock shared with the other workers of this GPU) keeps timing exclusive."""
    return Evaluation(job, pm, workdir, device, gpu_lock, lock_index).run()
