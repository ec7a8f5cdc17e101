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
class Tolerance:
    """Absolute/relative tolerance for floating outputs. Integer and bool outputs are compared exactly."""

    atol: float = 1e-2
    rtol: float = 1e-2


def _setting(default: Any, help: str, validator: Any = None, **cli: Any) -> Any:
    """An `EvalConfig` field, defined once: its default, validator and ``help``, the text of its ``kz eval``
    option and of docs/evaluator.md's settings table (a bool that defaults to True is phrased as a gerund:
    its option is ``--no-NAME``, "skip " + help). ``cli`` holds only where the command line differs from the
    field: ``flag`` (the option, when not ``--`` + the name with ``-``), ``choices``, ``metavar``,
    ``cli_values`` (command-line words for field values), ``cli_default`` (a command-line default kept apart
    from the library's on purpose; say why beside it), ``no_cli`` (why the field has no option). kzcore/cli.py
    builds the options and the EvalConfig from these; the trainer's ``[eval]`` TOML keys are the fields."""
    return attrs.field(default=default, validator=validator, metadata={"help": help, **cli})


DEVICES = ("auto", "cpu", "cuda")
INPUT_VARIATIONS = ("none", "scale", "full")
PRECISIONS = ("tf32", "any")


@attrs.frozen
class EvalConfig:
    """How candidates are evaluated. Recorded with every results file. Each field's help is its documentation
    (`_setting`); ``kz eval``'s options are generated from the fields."""

    device: str = _setting("auto", "where candidates run", choices=DEVICES)
    size: str = _setting("auto", "problem sizes: auto (small on a CPU) | full | a KZ_SIZES profile such as small")
    trials: int = _setting(5, "correctness trials per candidate", attrs.validators.ge(1))
    seed: int = _setting(0, "seed for inputs and weights (and for kz eval --policy's sampling)")
    atol: float = _setting(1e-2, "absolute tolerance (fp32 outputs)")
    rtol: float = _setting(1e-2, "relative tolerance (fp32 outputs)")
    timeout_s: float = _setting(180.0, "seconds per candidate (a worker past it is killed: timeout)", flag="--timeout")
    warmup: int = _setting(3, "untimed calls of reference and candidate before timing (GPU)")
    reps: int = _setting(100, "most timed repetitions (GPU)", attrs.validators.ge(1))
    # Timing stops early, after at least min_reps pairs, once both medians are known to within
    # timing_precision (relative standard error)
    min_reps: int = _setting(100, "fewest timed repetitions before stopping early", attrs.validators.ge(1))
    timing_precision: float = _setting(
        0.004, "stop timing once both medians' relative standard errors are below this (0: always all reps)",
        attrs.validators.ge(0),
    )  # fmt: skip
    gpu_work_check: bool = _setting(
        True, "profiling one forward (GPU) to check that most GPU time is in the candidate's own kernels"
    )
    max_timing_s: float = _setting(10.0, "seconds the timed pairs of one candidate may take: fewer reps beyond it")
    flush_l2: bool = _setting(True, "flushing L2 (a 256 MB write) before each timed call")
    # Queued after the flush, before the start event: the host's queueing of the timed call hides behind it;
    # raised for a side whose calls the host takes longer to queue (kzcore.builtins.timing.LaunchCover)
    launch_cover_us: float = _setting(
        100.0, "first GPU-side wait (us) before each timed call, raised while the host queues a call slower (GPU)",
        attrs.validators.ge(0),
    )  # fmt: skip
    # A kernel's speed can depend on where its inputs lie (kzcore/evaluate/placement.py): each side is timed
    # on this many placements of the same values, the repetitions shared among them, and the mean of the
    # per-placement medians kept
    timing_placements: int = _setting(
        8, "placements of the inputs the timing is spread over (GPU; fewer where copies would not fit)",
        attrs.validators.ge(1),
    )  # fmt: skip
    # Before each placement's timed pairs, flush L2 until the flush takes its quiet time again (at most this
    # long): on an H200 a job's first 20-40 ms of timing read slow, with one worker too, and another process's
    # cudaMalloc/cudaFree slows timed memory-bound kernels by 4-13 %; 50 ms lets nearly every placement start
    # on a quiet GPU (kzcore.builtins.timing.settle)
    settle_ms: float = _setting(
        50.0, "ms the timer may wait, before each placement, for the L2 flush to take its quiet time (GPU; 0: off)",
        attrs.validators.ge(0),
    )  # fmt: skip
    placement_shift_mib: float = _setting(
        0.0, "0: each placement a separate copy of the inputs; N: views N MiB apart in one buffer per input",
        attrs.validators.ge(0),
    )  # fmt: skip
    tf32: bool = _setting(False, "allow TF32 in the reference")
    workers_per_gpu: int = _setting(
        1, "overlap compile/correctness of N workers per GPU; timing stays exclusive", attrs.validators.ge(1)
    )
    # Spares take a dead worker's place at once instead of its slot waiting for a new worker's start-up
    # (10-13 s on a GPU: CUDA init, warm-up); "in all" on a CPU
    standby_workers: int = _setting(
        0, "idle workers kept started per GPU that replace a crashed worker at once (each holds a CUDA context)",
        attrs.validators.ge(0),
    )  # fmt: skip
    # A problem narrows the variation with KZ_INPUT_VARIATION (evaluate/inputs.py)
    input_variation: str = _setting(
        "scale", "trials after the first negate and rescale floating inputs (scale), also shift or redraw them (full)",
        attrs.validators.in_(INPUT_VARIATIONS), choices=INPUT_VARIATIONS,
    )  # fmt: skip
    input_scale_decades: float = _setting(2.0, "varied inputs are scaled by 10**u, |u| <= this", attrs.validators.ge(0))
    # With freshly constructed models, when the problem defines the profile (or one can be derived): catches
    # kernels that hard-code the tested shape
    second_shape: str = _setting(
        "alt", 'one more trial at this KZ_SIZES profile when the problem has it ("", or none on the command line: off)',
        metavar="PROFILE", cli_values={"none": ""},
    )  # fmt: skip
    # Re-verified: more trials on new seeds, the same input buffers refilled, a second timing pass
    implausible_speedup: float = _setting(
        10.0, "re-verify a speedup above this before accepting it (0: off)", attrs.validators.ge(0)
    )
    # fp32 problems: the candidate's error must be of TF32 class, not bf16's (kzcore/evaluate/precision.py)
    precision: str = _setting(
        "tf32", "what an fp32 problem accepts: tf32 (TF32-class error at most) | any (the tolerance alone)",
        attrs.validators.in_(PRECISIONS), choices=PRECISIONS,
    )  # fmt: skip
    # Each timed pair runs on a new draw of the problem's inputs, so no result cache keyed on input values
    # or pointers can hit (kzcore/timed.py)
    fresh_timed_inputs: bool = _setting(
        True, "drawing new input contents for every timed pair (off: one draw per placement)"
    )
    # Checked pairs are drawn from the operating system's randomness; the last pair is always checked
    timed_check_share: float = _setting(
        0.1, "share of timed pairs whose outputs are checked against the reference's (the last always is)",
        attrs.validators.and_(attrs.validators.ge(0), attrs.validators.le(1)),
    )  # fmt: skip
    # Cached; a problem whose outputs are ~0, ~constant, input-independent, random or non-finite marks its
    # results `problem_degenerate`
    problem_check: bool = _setting(True, "checking each problem (degenerate outputs) before its candidates")

    def tolerance_for(self, dtype_name: str) -> Tolerance:
        """Per-dtype tolerance: the configured one for fp32, looser for half types, tighter for fp64."""
        if dtype_name in ("torch.float16", "torch.bfloat16"):
            return Tolerance(max(self.atol, 2e-2), max(self.rtol, 2e-2))
        if dtype_name == "torch.float64":
            return Tolerance(min(self.atol, 1e-6), min(self.rtol, 1e-6))
        return Tolerance(self.atol, self.rtol)


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


Factory = Callable[..., Any]
