"""The stages before any trial: extract the source, run the static check, load the candidate and the
problem, construct both models and precompile the candidate's kernels. Neighbours: `stage` (the shared
state), `sizes` (the size profile); the language plugins do the work through the kernel-pipeline hooks."""

from __future__ import annotations

from pathlib import Path

from kzcore.errors import CompileError
from kzcore.evaluate import memory, sizes
from kzcore.evaluate.placement import tensor_bytes
from kzcore.evaluate.stage import MESSAGE_LIMIT, EvaluationState, Verdict, candidate_error, is_fatal_device_error
from kzcore.evaluate.tensors import clone_inputs
from kzcore.problems import import_module_from_file
from kzcore.types import Status


class Loading(EvaluationState):
    """Extract → static check → load → construct → precompile."""

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
        """Trial-0-shaped inputs for `precompile`, made under the shared GPU lock, with a free cached block as
        large as they are (`memory.reserve`) for the outputs the compile-only forward allocates outside it."""
        with self.clock("precompile"), self.device_ctx():
            self.seed(self.config.seed * 1000 + 1)
            inputs = list(problem_mod.get_inputs())
            if self.device == "cuda":
                memory.reserve(tensor_bytes(inputs))
            return inputs

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
