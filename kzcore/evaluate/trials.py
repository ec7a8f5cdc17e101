"""The correctness trials: each runs the candidate then the reference on fresh (possibly varied) inputs and
checks the outputs, the operators the forward ran, its launches and its inputs. Neighbours: `stage` (the state
each function takes), `variation` (input variation), `guard` (the operator recorder), `magnitude` and
``kz_check_outputs`` (the output check); `second_shape` and `timing` run `trial` again."""

from __future__ import annotations

import hashlib
import secrets

from kzcore.errors import CompileError
from kzcore.evaluate import checking, guard, memory, precision, variation
from kzcore.evaluate.refwatch import InputWatch
from kzcore.evaluate.stage import MESSAGE_LIMIT, EvaluationState, Verdict, candidate_error, is_fatal_device_error
from kzcore.evaluate.tensors import NotOwned, as_list, changed_inputs, refill, snapshot
from kzcore.types import Status

# a later trial's error within this many times trial 0's bar passes without measuring the bar again
PRECISION_RECHECK_MARGIN = 2.0


def trial_seed(config, index: int, salt: int = 0) -> int:
    """The RNG seed of trial ``index``: main trials 0..trials-1, then the extra ones (second shape,
    re-verification), each with its own seed; timing uses 999 and 998. ``salt``: the evaluation's secret
    (`draw_salt`; `salted`)."""
    return salted(config.seed * 1000 + index + 1, salt)


def salted(seed: int, salt: int) -> int:
    """``seed`` mixed with the evaluation's secret ``salt`` (``seed`` itself when there is none), as a 31-bit
    value: the CPU generator keeps only a seed's low 32 bits, so the mix must change those."""
    if not salt:
        return seed
    return int.from_bytes(hashlib.sha256(f"kz-trial:{seed}:{salt}".encode()).digest()[:4], "big") & 0x7FFFFFFF


def draw_salt(config) -> int:
    """The evaluation's secret for its trial inputs (`EvalConfig.secret_inputs`; 0 when off), from the operating
    system's randomness: drawn after the candidate is built, so neither its import nor its constructor can
    replay the trials' draws and store their answers for its forward to look up."""
    return secrets.randbits(30) + 1 if config.secret_inputs else 0


def correctness(state: EvaluationState, problem_mod, reference, candidate, launches) -> None:
    """The main trials, 0..trials-1, the candidate's input buffers carried from each to the next. Each trial
    holds the GPU shared on its own, so another worker's timing waits for one trial to end, not for all of them
    (what a timing waits for readers to finish is time the GPU is not timing)."""
    buffers = None
    for index in range(state.config.trials):
        with state.shared_gpu("trials"):
            buffers = trial(state, problem_mod, reference, candidate, launches, index=index, buffers=buffers)


def trial(
    state: EvaluationState, problem_mod, reference, candidate, launches, *, index: int, label: str = "",
    vary: bool = True, buffers: list | None = None,
) -> list:  # fmt: skip
    """One correctness trial on fresh inputs seeded by ``index`` (varied unless ``index`` is 0 or
    ``vary`` is False). The candidate runs first, on ``buffers`` refilled in place when they fit (the same
    tensors as the trial before, new values: a cache keyed on the input tensors or their pointers hands
    back stale outputs), else on clones; then the reference on the pristine inputs. Returns the buffers.
    Trial 0 of a varied run sets ``state.base_sizes``, the output scale later varied trials are judged at."""
    guarded = guards_torch_ops(state)
    mode = variation.effective_mode(state.config.input_variation, problem_mod) if vary else "none"
    with state.clock("inputs"):
        with state.device_ctx():
            seed = trial_seed(state.config, index, state.salt)
            state.seed(seed)
            pristine = list(problem_mod.get_inputs())
            changes = variation.plan(
                mode, state.config.seed, index, len(pristine), state.config.input_scale_decades, state.salt
            )
            pristine, applied = variation.vary(pristine, changes, seed)
        cand_inputs = refill(buffers, pristine)
        watch = InputWatch(pristine)
        if state.device == "cuda":
            memory.poison_free_cache()
    label = label or f"trial {index}"
    if applied:
        label += f" ({variation.describe(applied)})"
    with state.clock("candidate"):
        recorder = guard.recorder(record=guarded)
        try:
            with recorder:
                actual = as_list(state.forward(state.language, candidate, cand_inputs))
            state.sync()
        except CompileError as exc:
            raise Verdict(Status.COMPILE_ERROR, exc.log[:MESSAGE_LIMIT]) from None
        except Exception as exc:
            state.poisoned = is_fatal_device_error(exc)
            raise Verdict(Status.RUNTIME_ERROR, f"{label}: " + candidate_error(exc, state.candidate_file)) from None
    if recorder.forbidden:
        raise Verdict(
            Status.HACK_SUSPECTED,
            "forward " + guard.describe(recorder.forbidden),
        )
    changed = state.watch.settings_findings() if state.watch is not None else []
    if changed:  # a setting flipped here and back in a later call would change the next trial's draw or reference
        state.poisoned = True
        raise Verdict(Status.HACK_SUSPECTED, f"{label}: the candidate's forward " + "; ".join(changed))
    actual = own_outputs(actual, label)  # copied before the reference runs and allocates
    rewritten = watch.changed()
    if rewritten:
        raise Verdict(
            Status.HACK_SUSPECTED,
            f"{label}: the candidate's call changed the reference's own copy of input(s) {rewritten}, memory it was "
            "not given: a kernel may write only its arguments",
        )
    mutated = changed_inputs(pristine, cand_inputs)
    if mutated:
        raise Verdict(Status.HACK_SUSPECTED, f"forward modified its input(s) {mutated}; inputs must be read-only")
    if index == 0 and launches is not None and launches() == 0 and returned_tensor(actual):
        # an output that came from no kernel of its own; a forward that returned no tensor at all (a cut-off
        # completion, a missing return) is wrong, not a cheat: the output check below says so
        raise Verdict(Status.HACK_SUSPECTED, f"forward launched none of the candidate's own {state.language} kernels")
    with state.clock("reference"):
        expected = as_list(state.forward("reference", reference, pristine))
        state.sync()
    with state.clock("check"):
        config = state.config
        if index == 0 and mode != "none":
            state.base_sizes = variation.magnitudes(expected)
        elif applied and state.base_sizes:
            config = variation.varied_config(config, state.base_sizes, variation.magnitudes(expected))
        check = compare(state, expected, actual, config)
    state.fields.update(
        max_abs_err=max(state.fields.get("max_abs_err") or 0.0, check.max_abs_err),
        max_rel_err=max(state.fields.get("max_rel_err") or 0.0, check.max_rel_err),
    )
    if not check.ok:
        raise Verdict(Status.INCORRECT, f"{label}: {check.message}")
    if state.config.precision == "tf32" and precision.fp32_problem(expected, pristine):
        with state.clock("check"):
            if index == 0:
                precision_check(state, reference, pristine, expected, actual, label)
            else:
                precision_recheck(state, reference, pristine, expected, actual, label)
    return cand_inputs


def precision_check(state: EvaluationState, reference, inputs: list, expected: list, actual: list, label: str) -> None:
    """The precision policy (`precision`): on an fp32 problem the candidate's error must be of TF32 class;
    its relative L2 error, and the TF32 bar where one was measured, go into the result."""
    error = precision.rel_l2(actual, expected)
    state.fields["rel_l2_err"] = error
    if error <= precision.FP32_CLASS:
        return
    tf32, bf16 = precision_bars(state, reference, inputs, expected)
    state.fields["tf32_l2_err"] = tf32
    message = precision.verdict(error, tf32, bf16)
    if message:
        raise Verdict(Status.INCORRECT, f"{label}: {message}")


def precision_recheck(
    state: EvaluationState, reference, inputs: list, expected: list, actual: list, label: str
) -> None:
    """The precision policy on every trial after the first (varied trials, the second shape, re-verification's):
    a candidate that computes in fp32 on its first call and in bf16, or on a subsample of its input, from the
    second on stays inside the elementwise tolerance on a small output (a 0-d loss) and would otherwise be judged
    by trial 0 alone. An error within ``PRECISION_RECHECK_MARGIN`` times the bar trial 0 measured passes at no
    cost (fp32-class errors pass at once); beyond it the bar is measured on this trial's own inputs, since
    another scale or shape moves an honest TF32 kernel's error with the problem's, and the trial is judged by
    the same rule as trial 0."""
    error = precision.rel_l2(actual, expected)
    if error <= precision.FP32_CLASS:
        return
    if state.precision_bars is not None and error <= PRECISION_RECHECK_MARGIN * precision.bar(*state.precision_bars):
        return
    tf32, bf16 = precision.bars(
        lambda model, args: as_list(state.forward("reference", model, args)), reference, inputs, expected
    )
    message = precision.verdict(error, tf32, bf16)
    if message:
        raise Verdict(Status.INCORRECT, f"{label}: {message}")


def precision_bars(state: EvaluationState, reference, inputs: list, expected: list) -> tuple[float, float]:
    """The problem's (TF32, bf16) errors on ``inputs`` (`precision.bars`), kept in ``state.precision_bars``."""
    state.precision_bars = precision.bars(
        lambda model, args: as_list(state.forward("reference", model, args)), reference, inputs, expected
    )
    return state.precision_bars


def compare(state: EvaluationState, expected: list, actual: list, config=None):
    """The output check every trial and every checked timed pair makes: ``kz_check_outputs`` (elementwise,
    by whichever plugin), then the core's relative-error check."""
    return checking.check_outputs(state.pm, expected, actual, config or state.config, state.config)


def returned_tensor(outputs: list) -> bool:
    """Whether the candidate's forward returned any tensor."""
    import torch

    return any(isinstance(x, torch.Tensor) for x in outputs)


def own_outputs(outputs: list, label: str) -> list:
    """The candidate's outputs copied as they are right after its call (`tensors.snapshot`), so nothing that
    runs next (the reference, its allocations) can change what is checked; memory the outputs do not own
    is ``hack_suspected``."""
    try:
        return snapshot(outputs)
    except NotOwned as exc:
        raise Verdict(Status.HACK_SUSPECTED, f"{label}: {exc}") from None


def guards_torch_ops(state: EvaluationState) -> bool:
    """Whether the job's language has its candidates' PyTorch compute refused (an unregistered one: yes)."""
    language = job_language(state)
    return language.guard_torch_ops if language else True


def job_language(state: EvaluationState):
    """The job's registered `Language` (None when no plugin registers it)."""
    from kzcore.plugins import languages

    return languages(state.pm).items.get(state.language)
