"""The second-shape stage: one more trial at another size profile, with both models constructed afresh, so a
kernel that bakes in the tested shape fails. Neighbours: `sizes` (the profiles), `loading` and `trials` (what
it runs again)."""

from __future__ import annotations

import contextlib

from kzcore.evaluate import sizes
from kzcore.evaluate.stage import EvaluationState, Verdict, is_fatal_device_error


class SecondShape(EvaluationState):
    """Uses ``construct``, ``precompile_inputs``, ``precompile`` (`loading`) and ``trial`` (`trials`)."""

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
