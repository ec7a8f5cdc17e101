"""The timing stage and the re-verification of an implausible speedup (more trials, the second shape and a
second timing pass). Neighbours: `stage` (the state each function takes), ``kz_time_candidate`` (the timer),
`trials` and `second_shape` (re-run)."""

from __future__ import annotations

import functools
import statistics

import attrs

from kzcore.errors import TimedCheckFailed
from kzcore.evaluate import guard, memory, precision, trials
from kzcore.evaluate.placement import placements_for
from kzcore.evaluate.second_shape import second_shape
from kzcore.evaluate.spots import SpotCheck
from kzcore.evaluate.stage import EvaluationState, Verdict, candidate_error, is_fatal_device_error
from kzcore.evaluate.tensors import NotOwned, as_list, clone_inputs, refill, snapshot
from kzcore.timed import SIDES, TimedRounds, spread
from kzcore.types import Status
from kzcore.types import Timing as TimingResult

REVERIFY_TRIALS = 3  # extra trials on new seeds when a speedup is implausible
# The precision policy on the timed pairs' spot values (`precision_while_timed`): a placement's sampled error may
# reach this many times the problem's bar before it counts, and is judged only from this many values (or whole
# outputs). An honest TF32-class kernel sits near 0.35x the bar and a bf16-class one near 2.8x, so 1.25 leaves an
# honest kernel 3.5x for sampling noise, while a kernel with a share f of its outputs at bf16 (error ~ sqrt(f) x
# 2.8x the bar) keeps f under 0.2 (2x let half of a matmul's rows run on bf16 operands while timed)
TIMED_PRECISION_MARGIN = 1.25
TIMED_PRECISION_SAMPLES = 256
PLACEMENT_NOTE_SPREAD = 0.02  # per-placement medians further apart than this are named in the timing note
TIMING_FIELDS = (
    "ref_ms", "cand_ms", "speedup", "ref_spread", "cand_spread", "timing_reps", "timing_note", "placement_ms",
)  # fmt: skip


def per_placement(timing: TimingResult, rounds: TimedRounds) -> tuple[TimingResult, list]:
    """(the timing kept, each placement's [reference, candidate] median) from the samples the timer handed to
    ``rounds`` (`TimedRounds.samples`), placement by placement: per side the mean of the placements' medians
    (each placement is one draw of where the inputs lie; the mean is the speed to expect), the spread of all
    samples each over its placement's median (the noise within a placement), and a note naming a side whose
    placements' medians lie further apart than ``PLACEMENT_NOTE_SPREAD``. ``timing`` as the timer returned it,
    and no medians, with one placement or when the rounds hold no sample for some placement of either side (a
    timer that hands none over)."""
    samples = rounds.samples
    if rounds.placements == 1 or timing.ref_ms is None:
        return timing, []
    if not all(samples[side][j] for side in SIDES for j in range(rounds.placements)):
        note = f"the timer's medians over all {rounds.placements} placements (it handed the rounds no samples)"
        return attrs.evolve(timing, note="; ".join(x for x in (timing.note, note) if x)), []
    fields: dict = {}
    notes = [timing.note] if timing.note else []
    medians_of = {name: [statistics.median(x) for x in samples[name]] for name in SIDES}
    for side, name in (("ref", "reference"), ("cand", "candidate")):
        medians = medians_of[name]
        fields[f"{side}_ms"] = max(sum(medians) / len(medians), 1e-6)
        fields[f"{side}_spread"] = spread([x / m for xs, m in zip(samples[name], medians) for x in xs])
        low, high = min(medians), max(medians)
        if high > low * (1 + PLACEMENT_NOTE_SPREAD):
            notes.append(
                f"the {name}'s time depends on where its inputs lie: {low:.4g}-{high:.4g} ms over "
                f"{len(medians)} placements (their mean kept)"
            )
    placement_ms = [list(pair) for pair in zip(medians_of["reference"], medians_of["candidate"])]
    return attrs.evolve(timing, **fields, note="; ".join(notes)), placement_ms


def timing_inputs(state: EvaluationState, problem_mod) -> tuple[list, list]:
    """(reference inputs, candidate inputs): two copies of one draw on the timing seed."""
    with state.device_ctx():
        state.seed(trials.salted(state.config.seed * 1000 + 999, state.salt))
        inputs = list(problem_mod.get_inputs())
    return clone_inputs(inputs), clone_inputs(inputs)


def timed_draw(state: EvaluationState, problem_mod):
    """New input contents for a timed pair: the problem's own ``get_inputs`` on ``seed`` (None when the
    config keeps the contents fixed: ``fresh_timed_inputs`` off)."""
    if not state.config.fresh_timed_inputs:
        return None

    def draw(seed: int) -> list:
        with state.device_ctx():
            state.seed(seed)
            return list(problem_mod.get_inputs())

    return draw


def timed_check(state: EvaluationState, expected: list, actual: list, where: str) -> None:
    check = trials.compare(state, expected, actual)
    if not check.ok:
        raise TimedCheckFailed(
            f"{where}: the candidate's output differs from the reference's on the same inputs, though its "
            f"correctness trials passed (work skipped or reused while timed?): {check.message}"
        )


def watch_problem(state: EvaluationState, where: str) -> None:
    """The problem watch's per-call findings (`integrity.Watch.timed_findings`), as a failed timed check that
    replaces the worker. Run after every timed call of the candidate: only candidate code changes the reference,
    so a hook or a replaced forward that slows only the timed calls, gone by the check after timing, is there
    right after the call that put it in place."""
    found = state.watch.timed_findings() if state.watch is not None else []
    if found:
        state.poisoned = True
        raise TimedCheckFailed(f"{where}: the candidate's code " + "; ".join(found))


def guarded_calls(state: EvaluationState, forward, where: str):
    """``forward`` with every call under the trials' op guard, filling nothing (so the timed region holds only
    the candidate's own work): PyTorch compute there is a failed timed check, as it is ``hack_suspected`` in a
    trial. Unguarded calls were the ones a forward could tell from its trials (a fresh allocation is not
    NaN-filled there) and compute in with PyTorch."""
    if not trials.guards_torch_ops(state):
        return forward

    def call(*args):
        mode = guard.recorder(record=True, fill=False)
        with mode:
            out = forward(*args)
        if mode.forbidden:
            raise TimedCheckFailed(f"{where} of the candidate {guard.describe(mode.forbidden)}")
        return out

    return call


def timed_snapshot(outputs: list) -> list:
    try:
        return snapshot(outputs)
    except NotOwned as exc:
        raise TimedCheckFailed(f"a timed call: {exc}") from None


def spot_check(state: EvaluationState) -> SpotCheck | None:
    """Every timed pair's spot check (`spots.SpotCheck`), where ``timed_spots`` > 0 and every registered output
    checker judges by the elementwise rule (``elementwise = True`` on its function; the spots are never stricter
    than that rule, and could be than another); else None, with a note."""
    if not state.config.timed_spots:
        return None
    impls = state.pm.hook.kz_check_outputs.get_hookimpls()
    others = sorted(impl.plugin_name for impl in impls if not getattr(impl.function, "elementwise", False))
    if others:
        state.note_once(
            f"only the drawn timed pairs checked: output checker(s) {', '.join(others)} not marked elementwise "
            "(kzcore/evaluate/spots.py)"
        )
        return None
    return SpotCheck(state.config.tolerance_for, state.config.timed_spots)


def precision_while_timed(state: EvaluationState, rounds: TimedRounds, reference) -> None:
    """The precision policy on what was timed: on an fp32 problem (its trial 0 measured ``rel_l2_err``) under
    ``precision = "tf32"``, the candidate's relative L2 error over a placement's spot values must stay within
    ``TIMED_PRECISION_MARGIN`` times the problem's TF32-class bar, else it computed at a lower precision only
    while timed: ``hack_suspected``. The bar is trial 0's where it measured one, else measured now on the timed
    inputs (only when a sampled error is above fp32 class)."""
    trial_error, spots = state.fields.get("rel_l2_err"), rounds.spots
    if spots is None or trial_error is None or state.config.precision != "tf32":
        return
    # a sampled error needs enough values to stand for its outputs; an output compared whole is its own error
    judged = {g: err for g, (err, n) in spots.errors.items() if n >= TIMED_PRECISION_SAMPLES or g in spots.whole}
    if not judged:
        return
    group, error = max(judged.items(), key=lambda kv: kv[1])
    if error <= precision.FP32_CLASS:
        return
    if state.precision_bars is None:
        inputs = rounds.ref_inputs
        with state.clock("check"):
            trials.precision_bars(state, reference, inputs, as_list(state.forward("reference", reference, inputs)))
    tf32, bf16 = state.precision_bars
    limit = precision.bar(tf32, bf16)
    if bf16 <= 0 or error <= TIMED_PRECISION_MARGIN * limit:
        return
    where = f" (placement {group + 1} of {rounds.placements})" if rounds.placements > 1 else ""
    raise Verdict(
        Status.HACK_SUSPECTED,
        f"timed pairs{where}: relative L2 error {error:.2e} at the positions compared, where its trials gave "
        f"{trial_error:.2e} and operands rounded to TF32 give {tf32:.2e} (bf16 {bf16:.2e}): it computes below "
        "the problem's precision while timed",
    )


def book_phases(state: EvaluationState, timing: TimingResult) -> None:
    """The timer's phases into the result's stages as ``timing.NAME`` (parts of the ``timing`` stage, so not
    added to it again); inside a re-verification, whose stages are booked to ``reverify``, as ``reverify.NAME``."""
    seconds = state.clock.seconds
    for name, value in (timing.phases or {}).items():
        key = f"{state.clock.target or 'timing'}.{name}"
        seconds[key] = round(seconds.get(key, 0.0) + float(value), 6)


def timing_pass(state: EvaluationState, problem_mod, reference, candidate, inputs) -> None:
    """Time reference against candidate, both called directly (the forward hooks resolved once) with the
    candidate's launch instrumentation on, as in its trials, in one timer call whose pairs go round the
    placements of the inputs (`placement.placements_for`: fewer where copies would not fit, 1 on a CPU). Every
    pair runs on new input contents and some pairs, the last always, have their outputs checked
    (`kzcore.timed.TimedRounds`): a wrong timed output is ``hack_suspected``. The timing fields go into
    ``state.fields``, with ``state.notes`` in the timing note."""
    run_reference = state.direct_forward("reference", reference)
    run_candidate = guarded_calls(state, state.direct_forward(state.language, candidate), "a timed call")
    ref_placed, cand_placed = placements_for(
        state.config.timing_placements, state.config.placement_shift_mib, state.device, *inputs
    )
    spots = spot_check(state)
    refill = state.config.timed_refill
    if refill < 1 and spots is None:
        state.note_once(f"timed_refill={refill:g} needs the spot checks: every timed input redrawn whole")
        refill = 1.0
    rounds = TimedRounds(
        timed_draw(state, problem_mod), ref_placed, cand_placed, functools.partial(timed_check, state),
        timed_snapshot, state.config.timed_check_share, spots=spots, refill_share=refill,
        after_candidate=functools.partial(watch_problem, state, "right after a timed call of the candidate"),
        allocator=memory.ReleaseWatch() if state.device == "cuda" else None,
    )  # fmt: skip
    with state.clock("timing"):
        try:
            timing = state.pm.hook.kz_time_candidate(
                device=state.device,
                reference=lambda: run_reference(*rounds.ref_inputs),
                candidate=lambda: run_candidate(*rounds.cand_inputs),
                config=state.config,
                rounds=rounds,
            )
            rounds.finish()
            if not rounds.last_checked:
                raise RuntimeError(
                    "the timer plugin did not check its last timed pair (kz_time_candidate must run its "
                    "pairs through `rounds`: begin, took, end, and begin(last=True) for the last)"
                )
        except TimedCheckFailed as exc:
            raise Verdict(Status.HACK_SUSPECTED, str(exc)) from None
        except Exception as exc:
            state.poisoned = is_fatal_device_error(exc)
            raise Verdict(
                Status.RUNTIME_ERROR, "during timing: " + candidate_error(exc, state.candidate_file)
            ) from None
    precision_while_timed(state, rounds, reference)
    book_phases(state, timing)
    timing, placement_ms = per_placement(timing, rounds)
    state.fields.update(
        ref_ms=timing.ref_ms,
        cand_ms=timing.cand_ms,
        speedup=timing.speedup,
        ref_spread=timing.ref_spread,
        cand_spread=timing.cand_spread,
        timing_reps=timing.reps,
        timed_checks=rounds.checked + (state.fields.get("timed_checks") or 0),
        spot_checked=(rounds.spots.compared if rounds.spots else 0) + (state.fields.get("spot_checked") or 0),
        timing_note="; ".join(x for x in (timing.note, *state.notes) if x),
        placement_ms=placement_ms,
    )


def reverify(state: EvaluationState, problem_mod, candidate_mod, reference, candidate, launches, inputs) -> None:
    """Accept a speedup above ``implausible_speedup`` (``state.fields["speedup"]``, from `timing_pass`) only once
    it survives a re-check: the timing's own input tensors refilled with new values for more trials on new
    seeds (a cache keyed on them, or on their pointers, returns stale outputs), the second shape on a new seed,
    and a second timing pass, its outputs checked as the first's were (the lower speedup is kept). A failed
    re-check is ``hack_suspected``."""
    limit, speedup = state.config.implausible_speedup, state.fields.get("speedup")
    if not limit or not speedup or speedup <= limit:
        return
    ref_inputs, cand_inputs = inputs
    first = state.config.trials + 1  # index trials is the second shape's
    with state.clock.charge_to("reverify"):
        try:
            with state.shared_gpu("reverify"):
                buffers = cand_inputs
                for k in range(REVERIFY_TRIALS):
                    label = f"re-verification trial {k}"
                    buffers = trials.trial(
                        state, problem_mod, reference, candidate, launches, index=first + k, label=label,
                        buffers=buffers,
                    )  # fmt: skip
                second_shape(state, candidate_mod, launches, index=first + REVERIFY_TRIALS, locked_by_caller=True)
                refill(ref_inputs, buffers)  # both sides time the same (last trial's) values
        except Verdict as verdict:
            raise Verdict(
                Status.HACK_SUSPECTED,
                f"speedup {speedup:.3g}x is above implausible_speedup={limit:g} and re-verification failed: "
                + verdict.message,
                **verdict.fields,
            ) from None
        before = {name: state.fields.get(name) for name in TIMING_FIELDS}
        with state.exclusive_gpu():
            timing_pass(state, problem_mod, reference, candidate, inputs)
    again = state.fields.get("speedup")
    if again is None or speedup < again:
        state.fields.update(before)
    note = f"re-verified: speedup {speedup:.3g}x, then {again or 0:.3g}x on new values; the lower kept"
    state.fields.update(reverified=True, timing_note="; ".join(x for x in (state.fields.get("timing_note"), note) if x))
