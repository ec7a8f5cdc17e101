"""The stages before any trial: extract the source, run the static check, load the candidate and the
problem, construct both models and precompile the candidate's kernels. Neighbours: `stage` (the state each
function takes), `sizes` (the size profile); the language plugins do the work through the kernel-pipeline hooks."""

from __future__ import annotations

from pathlib import Path

from kzcore.errors import CompileError
from kzcore.evaluate import memory, sizes
from kzcore.evaluate.placement import tensor_bytes
from kzcore.evaluate.stage import MESSAGE_LIMIT, EvaluationState, Verdict, candidate_error, is_fatal_device_error
from kzcore.evaluate.tensors import clone_inputs
from kzcore.problems import import_module_from_file
from kzcore.types import Status


def extract_source(state: EvaluationState) -> str:
    """The candidate's source: given, or extracted from its completion (``kz_extract_source``)."""
    cand = state.job.candidate
    if cand.source is not None:
        return cand.source
    with state.clock("extract"):
        source = state.pm.hook.kz_extract_source(language=state.language, completion=cand.completion)
    if not source:
        raise Verdict(Status.FORMAT_ERROR, "no code block defining `class ModelNew` found in the completion")
    return source


def static_check(state: EvaluationState, source: str) -> None:
    with state.clock("static"):
        violations = state.pm.hook.kz_static_check(language=state.language, source=source)
    if violations:
        raise Verdict(Status.STATIC_CHECK_FAILED, "static check failed:\n- " + "\n- ".join(violations))


def load_candidate(state: EvaluationState, source: str):
    """The candidate's module, loaded from a real file (``state.candidate_file``, which error messages cite)."""
    state.candidate_file = state.workdir / f"kz_candidate_{state.uid}.py"
    state.candidate_file.write_text(source)
    with state.clock("compile"):
        try:
            module = state.pm.hook.kz_load_candidate(
                language=state.language, path=state.candidate_file, device=state.device
            )
        except CompileError as exc:
            raise Verdict(Status.COMPILE_ERROR, exc.log[:MESSAGE_LIMIT]) from None
        except SyntaxError as exc:
            raise Verdict(Status.COMPILE_ERROR, f"SyntaxError: {exc.msg} (line {exc.lineno})") from None
        except Exception as exc:
            raise Verdict(
                Status.COMPILE_ERROR, "importing the module failed: " + candidate_error(exc, state.candidate_file)
            ) from None
    if module is None:
        raise Verdict(Status.RUNTIME_ERROR, f"no plugin could load a {state.language!r} candidate")
    if not hasattr(module, "ModelNew"):
        raise Verdict(Status.FORMAT_ERROR, "the module defines no `ModelNew`")
    return module


def import_problem(state: EvaluationState, tag: str = ""):
    """A fresh instance of the problem module (``tag`` keeps a second one apart from the first)."""
    problem = state.job.problem
    path = Path(problem.path) if problem.path and Path(problem.path).is_file() else None
    if path is None:
        path = state.workdir / f"kz_problem_{state.uid}.py"
        path.write_text(problem.source)
    return import_module_from_file(path, f"kz_problem_{state.uid}{tag}")


def load_problem(state: EvaluationState):
    """The problem module at the configured size profile, which becomes ``state.size`` and the result's."""
    module = import_problem(state)
    size = state.config.size
    if size == "auto":
        size = "full" if state.device == "cuda" else "small"
    state.size, _ = sizes.apply_profile(module, size)
    state.fields["size"] = state.size
    return module


def construct(state: EvaluationState, problem_mod, candidate_mod):
    """(reference, candidate): both models built from the same seeded init inputs on the job's device."""
    with state.clock("construct"):
        with state.device_ctx():
            state.seed(state.config.seed)
            init = list(problem_mod.get_init_inputs())
            state.seed(state.config.seed)
            reference = problem_mod.Model(*init)
            if state.watch is not None:  # as built, before any candidate code can reach it
                state.watch.add_problem(problem_mod, reference)
            state.seed(state.config.seed)
            try:
                candidate = candidate_mod.ModelNew(*clone_inputs(init))
            except Exception as exc:
                raise Verdict(
                    Status.RUNTIME_ERROR,
                    "constructing ModelNew failed: " + candidate_error(exc, state.candidate_file),
                ) from None
        state.sync()
    return reference, candidate


def precompile_inputs(state: EvaluationState, problem_mod) -> list:
    """Trial-0-shaped inputs for `precompile`, made under the shared GPU lock, with a free cached block as
    large as they are (`memory.reserve`) for the outputs the compile-only forward allocates outside it."""
    with state.clock("precompile"), state.device_ctx():
        state.seed(state.config.seed * 1000 + 1)
        inputs = list(problem_mod.get_inputs())
        if state.device == "cuda":
            memory.reserve(tensor_bytes(inputs))
        return inputs


def precompile(state: EvaluationState, candidate, inputs) -> None:
    """Let the language plugin compile the candidate's kernels now, without the GPU lock
    (``kz_precompile``); when it cannot, they compile at their first launch inside the trials."""
    with state.clock("precompile"):
        try:
            state.pm.hook.kz_precompile(language=state.language, model=candidate, inputs=inputs)
        except CompileError as exc:
            raise Verdict(Status.COMPILE_ERROR, exc.log[:MESSAGE_LIMIT]) from None
        except Exception as exc:  # the trials will meet the same problem and report it
            state.poisoned = is_fatal_device_error(exc)
            if state.poisoned:
                raise Verdict(
                    Status.RUNTIME_ERROR, "precompile: " + candidate_error(exc, state.candidate_file)
                ) from None
