"""What every stage of one candidate's evaluation shares: the `Verdict` that ends it early, the `StageClock`
that books its seconds, and `EvaluationState`, the job's state with the device and GPU-lock helpers.

Neighbours: the stage functions (`loading`, `trials`, `second_shape`, `workcheck`, `timing`) each take an
`EvaluationState`; `pipeline.Evaluation.run` makes one per job and calls the stages in order."""

from __future__ import annotations

import contextlib
import itertools
import time
import traceback
from pathlib import Path

from kzcore.types import EvalJob, Status

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


class EvaluationState:
    """One job's state, handed to every stage function, and the helpers they share. The fields under "what the
    stages hand on" are everything one stage leaves for another; the driver passes the rest as arguments."""

    def __init__(self, job: EvalJob, pm, workdir: Path, device: str, gpu_lock=None, lock_index: int = 0):
        # the job and where it runs: set here, read by every stage
        self.job, self.pm, self.workdir, self.device = job, pm, workdir, device
        self.gpu_lock, self.lock_index = gpu_lock, lock_index
        self.config = job.config
        self.language = job.candidate.language
        self.uid = next(_counter)  # names this job's candidate and problem files and modules
        self.clock = StageClock()  # every stage books its seconds here: the result's ``stages``
        # what the stages hand on
        self.candidate_file: Path | None = None  # `loading.load_candidate`; error messages point into it
        self.size: str | None = None  # the size profile evaluated (`loading.load_problem`); `second_shape` differs
        self.base_sizes: list[float] = []  # trial 0's output magnitudes (`trials.trial`), for the varied trials
        self.precision_bars: tuple[float, float] | None = None  # (TF32, bf16) errors, where trial 0 measured them
        self.notes: list[str] = []  # harness notes (`second_shape`, `workcheck`) joined into timing_note (`timing`)
        # the result's fields: ``size`` (`loading`), errors (`trials`), the timing fields (`timing`, whose
        # ``speedup`` `timing.reverify` reads), ``second_shape``, ``reverified``
        self.fields: dict = {}
        self.salt = 0  # the trials' secret (`trials.draw_salt`), drawn once the candidate is built
        self.watch = None  # the evaluation's integrity.Watch: `loading.construct` hands it each reference built
        self.poisoned = False  # a stage saw a fatal device error or tampering: the worker must be replaced

    def languages(self) -> list:
        """Every language the worker's plugins register (the tamper watch covers each one's packages)."""
        from kzcore.plugins import languages

        return list(languages(self.pm).items.values())

    def seed(self, value: int) -> None:
        """The same random state ``torch.manual_seed`` gives on this worker's devices, without the calls it
        queues for backends that are not initialised (xpu, mtia), each of which formats the call stack:
        ~0.8 ms a call on an H200 worker, and every timed pair seeds its new inputs."""
        import torch

        torch.random.default_generator.manual_seed(value)
        if self.device == "cuda":
            torch.cuda.manual_seed_all(value)

    def device_ctx(self):
        import torch

        return torch.device(self.device)

    def sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def shared_gpu(self, what: str):
        """Held while this worker uses the GPU for anything but timing (other workers may too); ``what``: the
        stage it is for (one of ``devicelock.HOLDS``), which books the timings it keeps waiting."""
        return self._held("shared", what) if self.gpu_lock else contextlib.nullcontext()

    def exclusive_gpu(self):
        """Held while timing: no other worker on this GPU runs anything."""
        return self._held("exclusive") if self.gpu_lock else contextlib.nullcontext()

    @contextlib.contextmanager
    def _held(self, kind: str, *args):
        """The GPU lock's ``kind`` hold, its waiting and holding seconds added to the result's stages
        (``lock.shared_wait``, ``lock.shared_held``, the longest hold ``lock.shared_held_max``, ...; outside
        any stage's charge): with several workers
        per GPU, how long each hold kept the others' timings waiting is what decides the pool's throughput."""
        seconds = self.clock.seconds
        t0 = time.perf_counter()
        with getattr(self.gpu_lock, kind)(self.lock_index, *args) as across:
            t1 = time.perf_counter()
            if across is False:  # another process kept the GPU past the host-wide lock's wait: not alone
                seconds[f"lock.{kind}_not_across_runs"] = seconds.get(f"lock.{kind}_not_across_runs", 0) + 1
            try:
                yield
            finally:
                t2 = time.perf_counter()
                for name, spent in ((f"lock.{kind}_wait", t1 - t0), (f"lock.{kind}_held", t2 - t1)):
                    seconds[name] = round(seconds.get(name, 0.0) + spent, 6)
                longest = f"lock.{kind}_held_max"
                seconds[longest] = round(max(seconds.get(longest, 0.0), t2 - t1), 6)

    def forward(self, language: str, model, inputs):
        return self.pm.hook.kz_run_forward(language=language, model=model, inputs=inputs)

    def direct_forward(self, language: str, model):
        """``model`` itself when no plugin overrides ``kz_run_forward`` (only the built-in default, which calls
        it, is registered), else a call through the hook: what the timed loop calls, without the hook's
        dispatch on its path where nothing needs it."""
        if all(getattr(impl.function, "plain_call", False) for impl in self.pm.hook.kz_run_forward.get_hookimpls()):
            return model
        return lambda *inputs: self.forward(language, model, inputs)

    def note_once(self, note: str) -> None:
        if note and note not in self.notes:
            self.notes.append(note)
