"""The one-call API: one candidate against one KernelBench-format problem source, as KernelBench's
`eval_kernel_against_ref` takes them, through the same path as `kz eval` (`runner.evaluate`, local executor)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from kzcore.errors import ProblemFormatError, UnknownLanguageError
from kzcore.evaluate.runner import evaluate
from kzcore.plugins import get_plugin_manager, require_language
from kzcore.problems import check_problem_source
from kzcore.types import Candidate, EvalConfig, EvalResult, Problem

PROBLEM_NAME = "problem"  # the name the result carries: a source alone has no file name


def evaluate_source(
    problem_source: str, candidate_source: str, language: str, config: EvalConfig | None = None, *, pm=None
) -> EvalResult:
    """The `EvalResult` of ``candidate_source`` (a module defining ``ModelNew``, in ``language``) on the problem
    module ``problem_source`` (``Model``, ``get_inputs``, ``get_init_inputs``), evaluated under ``config``
    (default: ``EvalConfig()``) in a local worker started for this call and stopped before it returns.

    A candidate's failure (compile error, wrong output, timeout, ...) is the result's status and message. Only
    an unknown ``language`` or a problem source that is not a KernelBench problem raises: ValueError, one line.
    ``pm``: the plugin manager whose languages and plugins the worker loads (default: the process-wide one)."""
    pm = pm or get_plugin_manager()
    try:
        require_language(language, pm)
        check_problem_source(problem_source, "problem source")
    except (UnknownLanguageError, ProblemFormatError) as exc:
        raise ValueError(str(exc)) from None
    problem = Problem(name=PROBLEM_NAME, source=problem_source)
    candidate = Candidate(problem=problem.name, language=language, level=problem.level, source=candidate_source)
    with tempfile.TemporaryDirectory(prefix="kz-evaluate-source-") as tmp:
        # evaluate() files results as they come (resumable runs); one call keeps nothing, so the file is temporary
        (result,) = evaluate(
            [problem], [candidate], config or EvalConfig(), Path(tmp) / "results.jsonl", workers=1, pm=pm
        )
    return result
