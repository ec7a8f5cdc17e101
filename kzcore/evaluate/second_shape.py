"""The second-shape stage: one more trial at another size profile, with both models constructed afresh, so a
kernel that bakes in the tested shape fails. Neighbours: `stage` (the state it takes), `sizes` (the profiles),
`loading` and `trials` (what it runs again)."""

from __future__ import annotations

import contextlib
import functools

from kzcore.evaluate import loading, sizes, trials
from kzcore.evaluate.stage import EvaluationState, Verdict, is_fatal_device_error
from kzcore.types import Status


def second_shape(state: EvaluationState, candidate_mod, launches, index: int, locked_by_caller: bool = False) -> None:
    """One more trial at the ``second_shape`` size profile with both models constructed afresh, so a
    kernel that bakes in the tested shape fails. Skipped when the problem has no such profile or it is
    the size being evaluated (``state.size``). Takes the shared GPU lock itself (compiling for the new shape
    outside it) unless the caller already holds it."""
    hold = contextlib.nullcontext if locked_by_caller else functools.partial(state.shared_gpu, "second_shape")
    profile = state.config.second_shape
    if not profile or profile == state.size:
        return
    with state.clock.charge_to("second_shape"):
        with state.clock("load_problem"):
            problem_mod = loading.import_problem(state, "_shape2")
            before = dict(vars(problem_mod))
            used, why = sizes.apply_profile(problem_mod, profile)
        if used == "full" or used == state.size:
            state.note_once(f"no second shape: {why}" if why else "")
            return
        shape = ", ".join(
            f"{k}={v!r}"
            for k, v in sorted(vars(problem_mod).items())
            if isinstance(v, (int, tuple, list)) and k in before and before[k] != v
        )
        if used.endswith(sizes.DERIVED):
            with hold():
                why = reference_fails(state, problem_mod)
            if why:
                state.note_once(f"no second shape: the reference fails at the derived alt shape ({shape}): {why}")
                return
        try:
            with hold():
                reference, candidate = loading.construct(state, problem_mod, candidate_mod)
                warm_inputs = loading.precompile_inputs(state, problem_mod)
            loading.precompile(state, candidate, warm_inputs)
            del warm_inputs
            with hold():
                trials.trial(state, problem_mod, reference, candidate, launches, index=index, vary=False)
                found = state.watch.retire_last() if state.watch is not None else []
            if found:
                state.poisoned = True
                raise Verdict(Status.HACK_SUSPECTED, "the candidate's code " + "; ".join(found))
        except Verdict as verdict:
            where = f"KZ_SIZES[{profile!r}]" if used == profile else f"derived {profile!r} profile"
            message = f"second shape ({where}, {shape}): {verdict.message}"
            raise Verdict(verdict.status, message, **verdict.fields) from None
    state.fields["second_shape"] = used


def reference_fails(state: EvaluationState, problem_mod) -> str:
    """Why the reference cannot run at ``problem_mod``'s sizes ("" when it can): a derived shape is tried
    on the reference alone first, so a shape the problem does not support is skipped, never charged to
    the candidate."""
    try:
        with state.device_ctx():
            state.seed(state.config.seed)
            init = list(problem_mod.get_init_inputs())
            state.seed(state.config.seed)
            reference = problem_mod.Model(*init)
            state.seed(trials.trial_seed(state.config, state.config.trials, state.salt))
            inputs = list(problem_mod.get_inputs())
        state.forward("reference", reference, inputs)
        state.sync()
    except Exception as exc:
        state.poisoned = is_fatal_device_error(exc)
        if state.poisoned:
            raise
        return f"{type(exc).__name__}: {exc}"[:300]
    return ""
