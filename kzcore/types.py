"""Values that cross hook and process boundaries. All frozen attrs classes; JSON through `to_json` /
`from_json` in one place so results files stay stable (``schema`` is bumped on breaking changes)."""

from __future__ import annotations

import contextlib
import enum
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from kzcore.eval_config import EvalConfig as EvalConfig  # what a job carries: importable from here too

SCHEMA = 1


class Status(str, enum.Enum):
    """The verdict on one candidate. Ordered from earliest pipeline stage to success."""

    FORMAT_ERROR = "format_error"
    STATIC_CHECK_FAILED = "static_check_failed"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    INCORRECT = "incorrect"
    HACK_SUSPECTED = "hack_suspected"
    CORRECT = "correct"

    def __str__(self) -> str:
        return self.value


class LaunchCounter:
    """What ``kz_instrument_candidate`` returns: calling it gives how many of the candidate's own kernels have
    launched so far. ``bare()`` is a context manager during which the plugin takes its instrumentation off the
    launch path (for tools that time a candidate as it runs outside the evaluator; the evaluator's own timed
    pairs keep it on, as in the trials); without
    a ``bare`` callable it changes nothing. A plain zero-argument callable from a plugin is wrapped by
    `as_launch_counter`."""

    def __init__(self, count: Callable[[], int], bare: Callable[[], Any] | None = None):
        self._count, self._bare = count, bare

    def __call__(self) -> int:
        return self._count()

    def bare(self):
        return self._bare() if self._bare is not None else contextlib.nullcontext()


def as_launch_counter(value) -> LaunchCounter | None:
    """``kz_instrument_candidate``'s result as a LaunchCounter (None stays None: no count to give)."""
    if value is None or isinstance(value, LaunchCounter):
        return value
    return LaunchCounter(value)


@attrs.frozen
class Command:
    """A ``kz`` subcommand a plugin adds (``kz_register_commands``): ``configure(parser)`` declares its
    arguments on an ``argparse`` parser, ``run(args) -> int`` runs it."""

    name: str
    run: Callable[[Any], int]
    help: str = ""
    configure: Callable[[Any], None] | None = None


@attrs.frozen
class Problem:
    """One KernelBench-format problem: the source of a module defining Model, get_inputs, get_init_inputs."""

    name: str
    source: str
    level: int = 0
    path: str | None = None
    suite: str = ""

    @property
    def key(self) -> str:
        return f"level{self.level}/{self.name}"


@attrs.frozen
class Candidate:
    """A proposed solution to ``problem``: raw model output (``completion``) or a ready ``source``."""

    problem: str
    language: str
    level: int = 0
    sample: int = 0
    source: str | None = None
    completion: str | None = None
    origin: str = ""

    def __attrs_post_init__(self):
        if (self.source is None) == (self.completion is None):
            raise ValueError("a Candidate needs exactly one of source= or completion=")

    @property
    def key(self) -> str:
        return f"level{self.level}/{self.problem}#{self.language}#{self.sample}"

    @property
    def ident(self) -> tuple:
        """Matches the ``ident`` of the EvalJob it answers."""
        return (self.problem, self.language, self.sample)


def _positive_or_none(instance, attribute, value):
    if value is not None and not value > 0:
        raise ValueError(f"{attribute.name} must be positive or None, got {value!r}")


def _non_negative_or_none(instance, attribute, value):
    if value is not None and not value >= 0:
        raise ValueError(f"{attribute.name} must be >= 0 or None, got {value!r}")


# fast_p counts a speedup as faster than p only above p x (1 + margin): the margin is the spread of the speedup
# (a ratio of two timings: sqrt(ref_spread^2 + cand_spread^2), each IQR / median of its timed samples), never
# less than this floor, so parity (1.001x) is not "faster" however quiet the timings were
SPEEDUP_MARGIN_FLOOR = 0.01


def speedup_noise_margin(ref_spread: float | None, cand_spread: float | None) -> float:
    """The relative margin a speedup with these spreads must clear to count as faster (``SPEEDUP_MARGIN_FLOOR``
    at least; an unknown spread counts as 0)."""
    spread = ((ref_spread or 0.0) ** 2 + (cand_spread or 0.0) ** 2) ** 0.5
    return max(SPEEDUP_MARGIN_FLOOR, spread)


def _margin_of(result) -> float | None:
    return speedup_noise_margin(result.ref_spread, result.cand_spread) if result.speedup is not None else None


@attrs.frozen
class EvalJob:
    """What a worker receives: one candidate for one problem under one config."""

    problem: Problem
    candidate: Candidate
    config: EvalConfig

    def result(self, status: Status, message: str, **fields) -> EvalResult:
        """An EvalResult for this job, carrying the config that produced it."""
        cand, cfg = self.candidate, self.config
        return EvalResult(
            problem=cand.problem, level=self.problem.level, language=cand.language, sample=cand.sample,
            status=status, message=message, trials=cfg.trials, tf32=cfg.tf32, atol=cfg.atol, rtol=cfg.rtol,
            seed=cfg.seed, origin=cand.origin, code_hash=self.code_hash, **fields,
        )  # fmt: skip

    def failure(self, status: Status, message: str) -> EvalResult:
        """What an executor files when this job could not run to the end (its worker died, hung, ...)."""
        return self.result(status, message)

    @property
    def ident(self) -> tuple:
        """Matches the ``ident`` of this job's answer."""
        return (self.candidate.problem, self.candidate.language, self.candidate.sample)

    @property
    def code_hash(self) -> str:
        """Names the code this job judges, the problem's source and the candidate's: a saved result whose
        hash differs judged other code (kzcore.results.stale_results)."""
        cand = self.candidate
        code = f"source\0{cand.source}" if cand.source is not None else f"completion\0{cand.completion}"
        return hashlib.sha256(f"{self.problem.source}\0{code}".encode()).hexdigest()[:16]


@attrs.frozen
class ProblemCheckJob:
    """Check a problem module itself (no candidate): it runs, deterministically, with finite and
    non-degenerate outputs. Used by the Proposer's gates and ``kz suite check``."""

    problem: Problem
    config: EvalConfig
    max_bytes: int = 16 * 2**30  # memory budget: peak CUDA allocation, or tensor bytes (params+inputs+outputs) on CPU

    def failure(self, status: Status, message: str) -> ProblemReport:
        """A failed report: what an executor files when this check could not run to the end."""
        return ProblemReport(problem=self.problem.name, level=self.problem.level, reason=f"{status.value}: {message}")

    @property
    def ident(self) -> tuple:
        return (self.problem.name,)


@attrs.frozen
class ProblemReport:
    """The verdict on one problem module. ``ok`` means it passed every gate and filter."""

    problem: str
    level: int = 0
    ok_runs: bool = False
    deterministic: bool = False
    finite: bool = False
    degenerate: bool = True
    reason: str = ""
    stats: dict[str, float] = attrs.field(factory=dict)
    seconds: float = 0.0
    size: str = ""
    note: str = ""  # a check that could not run and was skipped (the verdict stands without it)
    # a check failed after the reference ran (out of memory in a comparison, an error in the checker): no verdict
    check_failed: bool = False

    @property
    def ok(self) -> bool:
        return self.ok_runs and self.deterministic and self.finite and not self.degenerate

    @property
    def key(self) -> str:
        return f"level{self.level}/{self.problem}"

    @property
    def ident(self) -> tuple:
        """Matches the ``ident`` of the ProblemCheckJob it answers."""
        return (self.problem,)


@attrs.frozen
class Timing:
    """Side-by-side timing of reference and candidate in one worker. ms are medians."""

    ref_ms: float | None = attrs.field(default=None, validator=_positive_or_none)
    cand_ms: float | None = attrs.field(default=None, validator=_positive_or_none)
    ref_spread: float | None = None  # interquartile range / median
    cand_spread: float | None = None
    reps: int = 0
    note: str = ""
    # seconds the timer spent in each of its phases (the built-in one: settle, warmup, pairs, and within the
    # pairs rounds and wait); the result's stages carry them as "timing.NAME", parts of the "timing" stage
    phases: dict[str, float] = attrs.field(factory=dict)

    @property
    def speedup(self) -> float | None:
        if self.ref_ms and self.cand_ms:
            return self.ref_ms / self.cand_ms
        return None


@attrs.frozen
class OutputCheck:
    """The verdict of comparing candidate outputs to reference outputs on one trial."""

    ok: bool
    message: str = ""
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    # (||a - e||, ||e||) per output, where the check computed them on the way (None where it did not): the
    # core's relative-error check (`evaluate.magnitude`) takes them instead of reading the outputs again
    norms: tuple[tuple[float, float] | None, ...] = ()


@attrs.frozen
class EvalResult:
    """The evaluator's verdict on one candidate. Failures of the candidate are data here, never exceptions."""

    problem: str
    level: int
    language: str
    sample: int
    status: Status = attrs.field(converter=Status)
    message: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    ref_ms: float | None = attrs.field(default=None, validator=_positive_or_none)
    cand_ms: float | None = attrs.field(default=None, validator=_positive_or_none)
    speedup: float | None = attrs.field(default=None, validator=_positive_or_none)
    ref_spread: float | None = None
    cand_spread: float | None = None
    # the margin fast_p used for this speedup (speedup_noise_margin of the spreads above; None when untimed):
    # faster than p only above p x (1 + speedup_margin). Results files without it get it from their spreads
    speedup_margin: float | None = attrs.field(
        default=attrs.Factory(_margin_of, takes_self=True), validator=_non_negative_or_none
    )
    timing_reps: int = 0
    timing_note: str = ""
    # per timed placement of the inputs (EvalConfig.timing_placements), [reference ms, candidate ms]: the
    # medians whose mean is ref_ms / cand_ms (empty when one placement was timed)
    placement_ms: list = attrs.field(factory=list)
    launches: int = 0
    stages: dict[str, float] = attrs.field(factory=dict)
    device: str = ""
    size: str = ""
    trials: int = 0
    tf32: bool = False
    atol: float = 0.0
    rtol: float = 0.0
    seed: int = 0
    origin: str = ""
    second_shape: str = ""  # the KZ_SIZES profile of the passed second-shape trial ("" when none ran)
    reverified: bool = False  # an implausible speedup passed re-verification (EvalConfig.implausible_speedup)
    timed_checks: int = 0  # timed pairs whose outputs were checked (EvalConfig.timed_check_share)
    spot_checked: int = 0  # timed pairs compared at drawn positions (EvalConfig.timed_spots)
    input_salt: int = 0  # the secret the trials' inputs were salted with (EvalConfig.secret_inputs; 0: none)
    # the first trial's relative L2 error, and the reference's own with TF32-rounded operands where it was
    # measured (EvalConfig.precision: kzcore/evaluate/precision.py)
    rel_l2_err: float | None = None
    tf32_l2_err: float | None = None
    # why the problem itself failed kz eval's problem check ("" when it passed or was not checked): results
    # on it are left out of pass@k / fast_p unless asked for (metrics.summarize(include_degenerate=True))
    problem_degenerate: str = ""
    code_hash: str = ""  # EvalJob.code_hash of the job it answers ("" in files written before it was recorded)
    schema: int = SCHEMA

    @property
    def correct(self) -> bool:
        return self.status is Status.CORRECT

    @property
    def verified(self) -> bool:
        """Correct on a problem the problem check did not flag: what training pays, keeps and fine-tunes on. On a
        flagged problem a trivial output (zeros, a constant) passes the output check, so `correct` there says
        nothing of the kernel."""
        return self.correct and not self.problem_degenerate

    @property
    def key(self) -> str:
        return f"level{self.level}/{self.problem}#{self.language}#{self.sample}"

    @property
    def ident(self) -> tuple:
        """Matches the ``ident`` of the EvalJob it answers."""
        return (self.problem, self.language, self.sample)


@attrs.frozen
class PromptSection:
    """A titled block of prompt text contributed by a plugin; lower ``order`` comes first."""

    title: str
    body: str
    order: int = 50


@attrs.frozen
class Phase:
    """One phase of the alternating trainer: ``role`` is "distill", "sft", "proposer" or "coder". A ``frozen``
    Proposer phase proposes its ``steps`` batches of tasks with the Proposer as it is, without training it
    (the method's frozen-Proposer ablation)."""

    role: str
    round: int
    steps: int
    frozen: bool = False


def to_json(obj: Any) -> dict:
    """attrs instance → JSON-safe dict (enums as their values)."""

    def ser(inst, field, value):
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, Path):
            return str(value)
        return value

    return attrs.asdict(obj, value_serializer=ser)


def from_json(cls: type, data: dict) -> Any:
    """JSON dict → attrs instance of ``cls``; unknown keys are ignored so old readers accept new files."""
    names = {f.name for f in attrs.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})
