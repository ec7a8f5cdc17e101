"""How candidates are evaluated: `EvalConfig`, each of its settings defined once (`_setting`: default,
validator, help), recorded with every results file and carried by every `EvalJob` (kzcore/types.py, which
``EvalConfig`` is importable from too). ``kz eval``'s options are built from the fields, and docs/evaluator.md's
settings table is checked against them."""

from __future__ import annotations

from typing import Any

import attrs


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


def _zero_or_above_one(name: str, value: float) -> None:
    if value != 0 and not value > 1:
        raise ValueError(f"{name} must be 0 (off) or above 1, not {value!r}")


DEVICES = ("auto", "cpu", "cuda")
INPUT_VARIATIONS = ("none", "scale", "full")
PRECISIONS = ("tf32", "any")
TIMED_ORDERS = ("candidate-first", "alternate")


@attrs.frozen
class EvalConfig:
    """How candidates are evaluated. Recorded with every results file. Each field's help is its documentation
    (`_setting`); ``kz eval``'s options are generated from the fields."""

    device: str = _setting("auto", "where candidates run", choices=DEVICES)
    size: str = _setting("auto", "problem sizes: auto (small on a CPU) | full | a KZ_SIZES profile such as small")
    trials: int = _setting(5, "correctness trials per candidate", attrs.validators.ge(1))
    seed: int = _setting(0, "seed for inputs and weights (and for kz eval --policy's sampling)")
    atol: float = _setting(1e-2, "absolute tolerance (fp32 outputs)", attrs.validators.ge(0))
    rtol: float = _setting(1e-2, "relative tolerance (fp32 outputs)", attrs.validators.ge(0))
    timeout_s: float = _setting(
        180.0, "seconds per candidate (a worker past it is killed: timeout)", attrs.validators.gt(0), flag="--timeout"
    )
    warmup: int = _setting(3, "untimed calls of reference and candidate before timing (GPU)", attrs.validators.ge(0))
    reps: int = _setting(100, "most timed repetitions (GPU)", attrs.validators.ge(1))
    # Timing stops early, after at least min_reps pairs, once both medians are known to within
    # timing_precision (relative standard error): a steady kernel stops at min_reps (2 pairs on each of the 8
    # placements), a noisy one or one whose speed depends on where its inputs lie runs up to reps
    min_reps: int = _setting(16, "fewest timed repetitions before stopping early", attrs.validators.ge(1))
    timing_precision: float = _setting(
        0.004, "stop timing once both medians' relative standard errors are below this (0: always all reps)",
        attrs.validators.ge(0),
    )  # fmt: skip
    gpu_work_check: bool = _setting(
        True, "profiling one forward (GPU) to check that most GPU time is in the candidate's own kernels"
    )
    max_timing_s: float = _setting(
        10.0, "seconds the timed pairs of one candidate may take: fewer reps beyond it", attrs.validators.gt(0)
    )
    flush_l2: bool = _setting(True, "flushing L2 (a 256 MB write) before each timed call")
    # Queued after the flush, before the start event: the host's queueing of the timed call hides behind it;
    # raised for a side whose calls the host takes longer to queue (kzcore.builtins.timing.LaunchCover)
    launch_cover_us: float = _setting(
        100.0, "first GPU-side wait (us) before each timed call, raised while the host queues a call slower (GPU)",
        attrs.validators.ge(0),
    )  # fmt: skip
    # 0: the cover only grows, to the slowest queueing of the timing (the rule the timing-truth runs hold to); N:
    # it follows the second slowest of the last N queueings of a side, so one slow queueing costs one retaken
    # call, not an idle GPU for the rest (kzcore.builtins.timing.LaunchCover; no ground-truth run of it yet)
    launch_cover_window: int = _setting(
        0, "timed calls whose queueing sizes the launch cover (0: it only grows) (GPU)", attrs.validators.ge(0)
    )
    # A kernel's speed can depend on where its inputs lie (kzcore/evaluate/placement.py): the timed pairs go
    # round this many placements of the inputs, and the mean of the per-placement medians is kept
    timing_placements: int = _setting(
        8, "placements of the inputs the timing is spread over (GPU; fewer where copies would not fit)",
        attrs.validators.ge(1),
    )  # fmt: skip
    # Before the timed pairs, flush L2 until the flush takes its quiet time again (at most this long): on an
    # H200 a job's first 20-40 ms of timing read slow, with one worker too, and another process's
    # cudaMalloc/cudaFree slows timed memory-bound kernels by 4-13 %; 50 ms lets nearly every timing start on a
    # quiet GPU (kzcore.builtins.timing.settle)
    settle_ms: float = _setting(
        50.0, "ms the timer may wait, before the timed pairs, for the L2 flush to take its quiet time (GPU; 0: off)",
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
    # The trials' draws (seeds, scales, the second shape's inputs) are salted per evaluation with a secret drawn
    # once the candidate is built, so no candidate can replay them ahead and store the answers
    secret_inputs: bool = _setting(
        True,
        "salting each evaluation's trial inputs with a secret drawn after the candidate is built (off: they "
        "follow --seed alone)",
    )
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
    # the reference's time as a cross-check between jobs on one problem (kzcore/evaluate/reftimes.py)
    reference_drift: float = _setting(
        1.25,
        "when a correct result's reference ran this many times slower than the median of the same problem's "
        "earlier correct results in the pool, its speedup is taken against that median (GPU; 0: off)",
        lambda _self, _attr, value: _zero_or_above_one("reference_drift", value),
    )
    # fp32 problems: the candidate's error must be of TF32 class, not bf16's (kzcore/evaluate/precision.py)
    precision: str = _setting(
        "tf32", "what an fp32 problem accepts: tf32 (TF32-class error at most) | any (the tolerance alone)",
        attrs.validators.in_(PRECISIONS), choices=PRECISIONS,
    )  # fmt: skip
    # Each timed pair runs on a new draw of the problem's inputs, so no result cache keyed on input values
    # or pointers can hit (kzcore/timed.py)
    fresh_timed_inputs: bool = _setting(
        True, "drawing new input contents for every timed pair (off: the same values every pair)"
    )
    # The candidate's call comes first in every timed pair, as in its trials: this pair's reference output and the
    # memory its forward freed do not exist yet while the candidate runs, so a kernel that reads device memory
    # outside its arguments finds nothing of this pair's inputs to copy (each pair draws new inputs).
    # "alternate" calls the reference first on even pairs (an order bias balanced, that exposure kept)
    timed_order: str = _setting(
        "candidate-first", "which side of each timed pair is called first: candidate-first | alternate",
        attrs.validators.in_(TIMED_ORDERS), choices=TIMED_ORDERS,
    )  # fmt: skip
    # Checked pairs are drawn from the operating system's randomness; the last pair is always checked
    timed_check_share: float = _setting(
        0.1, "share of timed pairs whose outputs are checked against the reference's (the last always is)",
        attrs.validators.and_(attrs.validators.ge(0), attrs.validators.le(1)),
    )  # fmt: skip
    # Every timed pair, drawn or not, has each side's outputs copied at this many positions right after its
    # call and compared (kzcore/evaluate/spots.py): a skipped or reused timed call is caught in the pair it happens
    timed_spots: int = _setting(
        1024, "positions of every timed pair's outputs compared with the reference's (0: only drawn pairs checked)",
        attrs.validators.ge(0),
    )  # fmt: skip
    # Per timed pair, the share of each input of 1M+ elements redrawn (one random span; the rest keeps the last
    # pair's values): less memory traffic under the exclusive lock, while a value-keyed cache that hits on the
    # unchanged rest returns outputs stale on the span, which the spot checks catch. Only with timed_spots. Off by
    # default: a candidate that diffs its input against a kept copy could recompute only the changed span, with
    # right outputs (docs/evaluator.md)
    timed_refill: float = _setting(
        1.0, "share of each large timed input redrawn per pair (1: all; less needs timed_spots)",
        attrs.validators.and_(attrs.validators.gt(0), attrs.validators.le(1)),
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
