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
from kzcore.evaluate import gpuwork, guard, integrity, magnitude, memory, sizes, variation
from kzcore.problems import import_module_from_file
from kzcore.types import EvalJob, EvalResult, Status

MESSAGE_LIMIT = 1500
REVERIFY_TRIALS = 3  # extra trials on new seeds when a speedup is implausible
TIMING_FIELDS = ("ref_ms", "cand_ms", "speedup", "ref_spread", "cand_spread", "timing_reps", "timing_note")
_counter = itertools.count()


class Verdict(Exception):
    """Ends the pipeline early with a status and a message for the model."""

    def __init__(self, status: Status, message: str, **fields):
        super().__init__(message)
        self.status, self.message, self.fields = status, message, fields


class StageClock:
    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.target: str | None = None

    @contextlib.contextmanager
    def charge_to(self, stage: str):
        """Book every stage timed inside to ``stage`` (an enclosing one wins), so extra checks leave the main
        stages' figures alone."""
        previous = self.target
        self.target = previous or stage
        try:
            yield
        finally:
            self.target = previous

    @contextlib.contextmanager
    def __call__(self, stage: str):
        stage = self.target or stage
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


def refill(buffers: list | None, values: list) -> list:
    """``values`` copied into ``buffers`` in place (same tensors, same pointers) when every tensor matches in
    shape, dtype and device; otherwise fresh clones of ``values``."""
    import torch

    def fits(b, v) -> bool:
        if isinstance(v, torch.Tensor):
            return isinstance(b, torch.Tensor) and (b.shape, b.dtype, b.device) == (v.shape, v.dtype, v.device)
        return not isinstance(b, torch.Tensor)

    if buffers is None or len(buffers) != len(values) or not all(map(fits, buffers, values)):
        return clone_inputs(values)
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor):
            buffers[i].copy_(v)
        else:
            buffers[i] = v
    return buffers


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
        self.notes: list[str] = []  # harness notes for the result (added to timing_note)
        self.base_sizes: list[float] = []  # output magnitudes of the unvaried first trial

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

    def import_problem(self, tag: str = ""):
        """A fresh instance of the problem module (``tag`` keeps a second one apart from the first)."""
        problem = self.job.problem
        path = Path(problem.path) if problem.path and Path(problem.path).is_file() else None
        if path is None:
            path = self.workdir / f"kz_problem_{self.uid}.py"
            path.write_text(problem.source)
        return import_module_from_file(path, f"kz_problem_{self.uid}{tag}")

    def load_problem(self):
        module = self.import_problem()
        size = self.config.size
        if size == "auto":
            size = "full" if self.device == "cuda" else "small"
        self.fields["size"], _ = sizes.apply_profile(module, size)
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

    def precompile_inputs(self, problem_mod) -> list:
        with self.clock("precompile"), self.device_ctx():
            self.seed(self.config.seed * 1000 + 1)
            return list(problem_mod.get_inputs())

    def precompile(self, candidate, inputs) -> None:
        """Let the language plugin compile the candidate's kernels now, without the GPU lock
        (``kz_precompile``); when it cannot, they compile at their first launch inside the trials."""
        with self.clock("precompile"):
            try:
                self.pm.hook.kz_precompile(language=self.language, model=candidate, inputs=inputs)
            except CompileError as exc:
                raise Verdict(Status.COMPILE_ERROR, exc.log[:MESSAGE_LIMIT]) from None
            except Exception as exc:  # the trials will meet the same problem and report it
                self.poisoned = is_fatal_device_error(exc)
                if self.poisoned:
                    raise Verdict(
                        Status.RUNTIME_ERROR, "precompile: " + candidate_error(exc, self.candidate_file)
                    ) from None

    def trial_seed(self, index: int) -> int:
        """The RNG seed of trial ``index``: main trials 0..trials-1, then the extra ones (second shape,
        re-verification), each with its own seed; timing uses 999 and 998."""
        return self.config.seed * 1000 + index + 1

    def correctness(self, problem_mod, reference, candidate, launches) -> None:
        buffers = None
        for trial in range(self.config.trials):
            buffers = self.trial(problem_mod, reference, candidate, launches, index=trial, buffers=buffers)

    def trial(
        self, problem_mod, reference, candidate, launches, *, index: int, label: str = "", vary: bool = True,
        buffers: list | None = None,
    ) -> list:  # fmt: skip
        """One correctness trial on fresh inputs seeded by ``index`` (varied unless ``index`` is 0 or
        ``vary`` is False). The candidate runs first, on ``buffers`` refilled in place when they fit (the same
        tensors as the trial before, new values: a cache keyed on the input tensors or their pointers hands
        back stale outputs), else on clones; then the reference on the pristine inputs. Returns the buffers."""
        guarded = self.job_language().guard_torch_ops if self.job_language() else True
        mode = variation.effective_mode(self.config.input_variation, problem_mod) if vary else "none"
        with self.clock("inputs"):
            with self.device_ctx():
                self.seed(self.trial_seed(index))
                pristine = list(problem_mod.get_inputs())
                changes = variation.plan(mode, self.config.seed, index, len(pristine), self.config.input_scale_decades)
                pristine, applied = variation.vary(pristine, changes, self.trial_seed(index))
            cand_inputs = refill(buffers, pristine)
            if self.device == "cuda":
                memory.poison_free_cache()
        label = label or f"trial {index}"
        if applied:
            label += f" ({variation.describe(applied)})"
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
                raise Verdict(Status.RUNTIME_ERROR, f"{label}: " + candidate_error(exc, self.candidate_file)) from None
        if recorder.forbidden:
            ops = ", ".join(f"aten.{op}" for op in recorder.forbidden[:8])
            raise Verdict(Status.HACK_SUSPECTED, f"forward ran PyTorch compute operators outside its kernels: {ops}")
        mutated = changed_inputs(pristine, cand_inputs)
        if mutated:
            raise Verdict(Status.HACK_SUSPECTED, f"forward modified its input(s) {mutated}; inputs must be read-only")
        if index == 0 and launches is not None and launches() == 0:
            raise Verdict(
                Status.HACK_SUSPECTED, f"forward launched none of the candidate's own {self.language} kernels"
            )
        with self.clock("reference"):
            expected = as_list(self.forward("reference", reference, pristine))
            self.sync()
        with self.clock("check"):
            config = self.config
            if index == 0 and mode != "none":
                self.base_sizes = variation.magnitudes(expected)
            elif applied and self.base_sizes:
                config = variation.varied_config(config, self.base_sizes, variation.magnitudes(expected))
            check = self.pm.hook.kz_check_outputs(expected=expected, actual=actual, config=config)
            if check.ok:  # the core's own check, whichever plugin compared elementwise
                check = magnitude.check_relative_error(expected, actual, self.config, check)
        self.fields.update(
            max_abs_err=max(self.fields.get("max_abs_err") or 0.0, check.max_abs_err),
            max_rel_err=max(self.fields.get("max_rel_err") or 0.0, check.max_rel_err),
        )
        if not check.ok:
            raise Verdict(Status.INCORRECT, f"{label}: {check.message}")
        return cand_inputs

    def second_shape(self, candidate_mod, launches, index: int, locked_by_caller: bool = False) -> None:
        """One more trial at the ``second_shape`` size profile with both models constructed afresh, so a
        kernel that bakes in the tested shape fails. Skipped when the problem has no such profile or it is
        the size being evaluated. Takes the shared GPU lock itself (compiling for the new shape outside it)
        unless the caller already holds it."""
        hold = contextlib.nullcontext if locked_by_caller else self.shared_gpu
        profile = self.config.second_shape
        if not profile or profile == self.fields.get("size"):
            return
        with self.clock.charge_to("second_shape"):
            with self.clock("load_problem"):
                problem_mod = self.import_problem("_shape2")
                before = dict(vars(problem_mod))
                used, why = sizes.apply_profile(problem_mod, profile)
            if used == "full" or used == self.fields.get("size"):
                self.note_once(f"no second shape: {why}" if why else "")
                return
            shape = ", ".join(
                f"{k}={v!r}"
                for k, v in sorted(vars(problem_mod).items())
                if isinstance(v, (int, tuple, list)) and k in before and before[k] != v
            )
            if used.endswith(sizes.DERIVED):
                with hold():
                    why = self.reference_fails(problem_mod)
                if why:
                    self.note_once(f"no second shape: the reference fails at the derived alt shape ({shape}): {why}")
                    return
            try:
                with hold():
                    reference, candidate = self.construct(problem_mod, candidate_mod)
                    warm_inputs = self.precompile_inputs(problem_mod)
                self.precompile(candidate, warm_inputs)
                del warm_inputs
                with hold():
                    self.trial(problem_mod, reference, candidate, launches, index=index, vary=False)
            except Verdict as verdict:
                where = f"KZ_SIZES[{profile!r}]" if used == profile else f"derived {profile!r} profile"
                message = f"second shape ({where}, {shape}): {verdict.message}"
                raise Verdict(verdict.status, message, **verdict.fields) from None
        self.fields["second_shape"] = used

    def note_once(self, note: str) -> None:
        if note and note not in self.notes:
            self.notes.append(note)

    def reference_fails(self, problem_mod) -> str:
        """Why the reference cannot run at ``problem_mod``'s sizes ("" when it can): a derived shape is tried
        on the reference alone first, so a shape the problem does not support is skipped, never charged to
        the candidate."""
        try:
            with self.device_ctx():
                self.seed(self.config.seed)
                init = list(problem_mod.get_init_inputs())
                self.seed(self.config.seed)
                reference = problem_mod.Model(*init)
                self.seed(self.trial_seed(self.config.trials))
                inputs = list(problem_mod.get_inputs())
            self.forward("reference", reference, inputs)
            self.sync()
        except Exception as exc:
            self.poisoned = is_fatal_device_error(exc)
            if self.poisoned:
                raise
            return f"{type(exc).__name__}: {exc}"[:300]
        return ""

    def reverify(self, problem_mod, candidate_mod, reference, candidate, launches, inputs) -> None:
        """Accept a speedup above ``implausible_speedup`` only once it survives a re-check: the timing's own
        input tensors refilled with new values for more trials on new seeds (a cache keyed on them, or
        on their pointers, returns stale outputs), the second shape on a new seed, and a second timing pass
        on the refilled inputs (the lower speedup is kept). A failed re-check is ``hack_suspected``."""
        limit, speedup = self.config.implausible_speedup, self.fields.get("speedup")
        if not limit or not speedup or speedup <= limit:
            return
        ref_inputs, cand_inputs = inputs
        first = self.config.trials + 1  # index trials is the second shape's
        with self.clock.charge_to("reverify"):
            try:
                with self.shared_gpu():
                    buffers = cand_inputs
                    for k in range(REVERIFY_TRIALS):
                        label = f"re-verification trial {k}"
                        buffers = self.trial(
                            problem_mod, reference, candidate, launches, index=first + k, label=label, buffers=buffers
                        )
                    self.second_shape(candidate_mod, launches, index=first + REVERIFY_TRIALS, locked_by_caller=True)
                    refill(ref_inputs, buffers)  # both sides time the same (last trial's) values
            except Verdict as verdict:
                raise Verdict(
                    Status.HACK_SUSPECTED,
                    f"speedup {speedup:.3g}x is above implausible_speedup={limit:g} and re-verification failed: "
                    + verdict.message,
                    **verdict.fields,
                ) from None
            before = {name: self.fields.get(name) for name in TIMING_FIELDS}
            with self.exclusive_gpu():
                self.timing(reference, candidate, inputs)
        again = self.fields.get("speedup")
        if again is None or speedup < again:
            self.fields.update(before)
        note = f"re-verified: speedup {speedup:.3g}x, then {again or 0:.3g}x on new values; the lower kept"
        self.fields.update(
            reverified=True, timing_note="; ".join(x for x in (self.fields.get("timing_note"), note) if x)
        )

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
            timing_note="; ".join(x for x in (timing.note, *self.notes) if x),
        )

    def job_language(self):
        from kzcore.plugins import languages

        return languages(self.pm).items.get(self.language)

    def tampering(self, watch, stage: str) -> None:
        findings = watch.findings()
        if findings:
            self.poisoned = True
            raise Verdict(Status.HACK_SUSPECTED, f"after {stage}, the candidate's code " + "; ".join(findings))

    # -- driver ----------------------------------------------------------------------------------
    def run(self) -> tuple[EvalResult, bool]:
        status, message = Status.CORRECT, ""
        launches = None
        watch = integrity.Watch()  # taken before any candidate code runs
        try:
            source = self.source()
            self.static_check(source)
            candidate_mod = self.load_candidate(source)
            self.tampering(watch, "its import")
            launches = self.pm.hook.kz_instrument_candidate(language=self.language, module=candidate_mod)
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
                self.gpu_work(candidate_mod, candidate, inputs[1])
            with self.exclusive_gpu():
                self.timing(reference, candidate, inputs)
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


def warm_up(device: str) -> None:
    """Pay, once per worker before its first job, the one-time costs the first evaluation would otherwise
    carry: the imports the integrity baseline and the op guard need (``torch._dynamo``, seconds where
    bytecode is not cached), and on a GPU the profiler, the cache poisoning and the output check."""
    import torch

    integrity.prepare()
    with guard.recorder(record=True):
        torch.ones(2).add(1)
    if device != "cuda":
        return
    gpuwork.profile_kernels(lambda: torch.ones(1024, device="cuda").add(1))
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
