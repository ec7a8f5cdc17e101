"""Parent side of evaluation: validate, skip what the results file already holds, check each problem
once (`problem_check`: degenerate problems flag their results), send the candidates to an executor, and
file every result as it arrives (results file + the kz_result_filed hook)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import attrs

from kzcore.evaluate.reftimes import ReferenceTimes
from kzcore.executors import Executor, open_executor
from kzcore.plugins import get_plugin_manager, plugin_specs, require_language
from kzcore.results import ResultsWriter, read_headers, read_results, run_header
from kzcore.types import Candidate, EvalConfig, EvalJob, EvalResult, Problem


def same_settings(result: EvalResult, config: EvalConfig) -> bool:
    """Whether an earlier result was produced under the verdict-relevant settings of ``config`` (a re-run
    with other tolerances, trials, seed or TF32 evaluates again; its lines supersede the old ones)."""
    return (result.trials, result.atol, result.rtol, result.seed, result.tf32) == (
        config.trials,
        config.atol,
        config.rtol,
        config.seed,
        config.tf32,
    )


def retract_changed(problems: list[Problem], candidates: list[Candidate], config: EvalConfig, out: Path) -> list:
    """Retract the results saved in ``out`` under these settings that judged other code than ``candidates``
    hold now (`EvalJob.code_hash`: the candidate's code and its problem's source), so that resuming evaluates
    those candidates again instead of reporting verdicts on code that is gone. Returns the retracted results.
    Results from other settings are left alone: they are evaluated again anyway."""
    from kzcore.results import stale_results

    if not out.exists():
        return []
    by_key = {(p.level, p.name): p for p in problems}
    hashes = {
        c.key: EvalJob(problem=by_key[(c.level, c.problem)], candidate=c, config=config).code_hash
        for c in candidates
        if (c.level, c.problem) in by_key
    }
    saved = read_results(out, on_skip=lambda message: None)  # read again below, where skipped lines are reported
    stale = stale_results([r for r in saved if same_settings(r, config)], hashes)
    if stale:
        writer = ResultsWriter(out)
        try:
            for result in stale:
                writer.write_stale(result, hashes[result.key])
        finally:
            writer.close()
    return stale


def plan_jobs(
    problems: list[Problem], candidates: list[Candidate], config: EvalConfig, done: set[str]
) -> list[EvalJob]:
    by_key = {(p.level, p.name): p for p in problems}
    jobs = []
    for cand in candidates:
        problem = by_key.get((cand.level, cand.problem))
        if problem is None or cand.key in done:
            continue
        jobs.append(EvalJob(problem=problem, candidate=cand, config=config))
    return jobs


def prepare_candidates(jobs: list[EvalJob], config: EvalConfig, pm) -> None:
    """Hand each language's candidate sources to its plugin before any job is sent (kz_prepare_candidates),
    so work such as ahead-of-time builds runs here, on this machine's CPUs, and no evaluation worker waits."""
    by_language: dict[str, list[str]] = {}
    for job in jobs:
        cand = job.candidate
        source = cand.source
        if source is None:
            source = pm.hook.kz_extract_source(language=cand.language, completion=cand.completion)
        if source:
            by_language.setdefault(cand.language, []).append(source)
    for language, sources in sorted(by_language.items()):
        pm.hook.kz_prepare_candidates(language=language, sources=sources, config=config)


def map_prepared(pool, jobs: list[EvalJob], pm=None):
    """``pool.map(jobs)`` after ``prepare_candidates``: what every caller that hands a pool candidate code
    (the trainer's reward, the Proposer's pass rates) uses, so a language's ahead-of-time work (cuda-inline
    builds) runs on this machine's CPUs before any worker waits for it."""
    if not jobs:
        return iter(())
    prepare_candidates(jobs, jobs[0].config, pm or get_plugin_manager())
    return ReferenceTimes.of(pool).checked(pool.map(jobs), jobs)


@attrs.frozen
class ProblemVerdicts:
    """What the problem check said about a set of problems, by (level, name): ``flagged`` (it ran, and fails:
    its results are left out of the scores) and ``unchecked`` (the check reached no verdict: its results count,
    unvouched for). Each maps to the reason."""

    flagged: dict[tuple[int, str], str] = attrs.field(factory=dict)
    unchecked: dict[tuple[int, str], str] = attrs.field(factory=dict)
    checked: list[tuple[int, str]] = attrs.field(factory=list)  # every problem asked about

    def summary(self) -> dict:
        """The verdicts as the results file's run header records them: the problems asked about
        (``level<L>/<name>``), and those flagged or left unchecked (label → reason)."""
        return {
            "checked": [f"level{lv}/{name}" for lv, name in sorted(self.checked)],
            "flagged": {f"level{lv}/{name}": why for (lv, name), why in sorted(self.flagged.items())},
            "unchecked": {f"level{lv}/{name}": why for (lv, name), why in sorted(self.unchecked.items())},
        }


def unchecked_line(unchecked: dict[tuple[int, str], str], limit: int = 4) -> str:
    """One line naming the problems the problem check reached no verdict on, with the first reasons."""
    named = [f"level{lv}/{name} ({textwrap.shorten(why, 160)})" for (lv, name), why in sorted(unchecked.items())]
    more = f"; … and {len(named) - limit} more" if len(named) > limit else ""
    return (
        f"the problem check reached no verdict on {len(named)} problem(s), whose results count unvouched for "
        f"(the same command run again checks them again): {'; '.join(named[:limit])}{more}"
    )


def unvouched_problems(out: Path) -> set[tuple[int, str]]:
    """The (level, name) of problems that the latest run header of ``out`` to mention them records as
    ``problem_check.unchecked``: their saved results were filed without a verdict on the problem. Lines that
    do not read are skipped silently (the results' reader reports them)."""
    last: dict[tuple[int, str], bool] = {}
    for header in read_headers(out, on_skip=lambda *_: None):
        record = header.get("problem_check") or {}
        unchecked = record.get("unchecked") or {}
        for label in [*(record.get("checked") or []), *unchecked]:
            level, _, name = str(label).removeprefix("level").partition("/")
            if level.isdigit() and name:
                last[(int(level), name)] = label in unchecked
    return {key for key, unchecked in last.items() if unchecked}


def reflag(result: EvalResult, verdicts: ProblemVerdicts, checked: set[tuple[int, str]], writer) -> EvalResult:
    """``result`` (saved by an earlier run) with its problem's flag as the verdicts on ``checked`` give it now;
    where that changed, the new line goes to ``writer`` (a later line for a key replaces the earlier one)."""
    key = (result.level, result.problem)
    if key not in checked or result.problem_degenerate == verdicts.flagged.get(key, ""):
        return result
    result = attrs.evolve(result, problem_degenerate=verdicts.flagged.get(key, ""))
    writer.write(result)
    return result


def flagged_problems(problems: list[Problem], config: EvalConfig, pool) -> ProblemVerdicts:
    """The problem check's verdicts on ``problems``: those that fail it (run once per problem through
    ``pool``, cached on disk; `problem_check.checked_problems`) and those it reached no verdict on; none when
    ``config.problem_check`` is off."""
    if not config.problem_check or not problems:
        return ProblemVerdicts()
    from kzcore.evaluate.problem_check import checked_problems, degenerate_reason, unchecked_reason

    device = getattr(pool, "device", None) or config.device
    reports = checked_problems(problems, config, pool, device)
    verdicts = ProblemVerdicts(checked=[(p.level, p.name) for p in problems])
    for p in problems:
        for reasons, why in ((verdicts.flagged, degenerate_reason), (verdicts.unchecked, unchecked_reason)):
            if reason := why(reports[p.key]):
                reasons[(p.level, p.name)] = reason
    return verdicts


def evaluate(
    problems: list[Problem],
    candidates: list[Candidate],
    config: EvalConfig,
    out: Path,
    executor: str | Executor = "local",
    workers: int | None = None,
    on_result: Callable[[EvalResult], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_stale: Callable[[list[EvalResult]], None] | None = None,
    on_unchecked: Callable[[dict[tuple[int, str], str]], None] | None = None,
    pm=None,
) -> list[EvalResult]:
    """Evaluate ``candidates`` and append results to ``out``; returns every result for these candidates,
    including ones already in ``out`` from an earlier (interrupted) run, which are not evaluated again — unless
    they judged other code than the candidate holds now (a changed solution, a resampled completion, a changed
    problem source): those are retracted in ``out`` (`retract_changed`; ``on_stale`` hears which) and evaluated
    again.

    ``executor``: a registered executor's name (opened for this call and closed after it; ``workers``
    workers), or an executor already started (``open_executor``), which is used and left open — the trainer
    holds one for its whole run.

    ``on_unchecked`` hears the problems the problem check reached no verdict on, (level, name) → why, before
    their candidates run: their results count, unvouched for. The run header records both kinds of verdict."""
    pm = pm or get_plugin_manager()
    for language in sorted({c.language for c in candidates}):
        require_language(language, pm)
    wanted = {c.key for c in candidates}
    stale = retract_changed(problems, candidates, config, out)
    if stale and on_stale:
        on_stale(stale)
    previous = [r for r in read_results(out) if r.key in wanted and same_settings(r, config)]
    jobs = plan_jobs(problems, candidates, config, {r.key for r in previous})
    if on_start:
        on_start(len(previous), len(jobs))
    results = list(previous)
    # saved results whose problem an earlier run filed without a verdict: checked again now
    unvouched = (
        unvouched_problems(out) & {(r.level, r.problem) for r in previous}
        if config.problem_check and previous
        else set()
    )
    if not jobs and not unvouched:
        return results
    prepare_candidates(jobs, config, pm)
    own = isinstance(executor, str)  # a name: this call opens (warm-up before the header) and closes it
    pool = open_executor(executor, workers=workers, config=config, pm=pm) if own else executor
    writer = ResultsWriter(out)
    try:
        asked = {(j.problem.level, j.problem.name): j.problem for j in jobs}
        asked |= {k: p for p in problems if (k := (p.level, p.name)) in unvouched and k not in asked}
        checked = list(asked.values())
        verdicts = flagged_problems(checked, config, pool)
        if verdicts.unchecked and on_unchecked:
            on_unchecked(verdicts.unchecked)
        header = run_header(config, dict(getattr(pool, "info", {})), plugin_specs(pm), pm=pm)
        writer.write_header(header | {"problem_check": verdicts.summary()})
        if config.problem_check:
            results = [reflag(r, verdicts, set(asked), writer) for r in results]
        flags = verdicts.flagged
        for result in ReferenceTimes.of(pool).checked(pool.map(jobs), jobs):
            if flags.get((result.level, result.problem)):
                result = attrs.evolve(result, problem_degenerate=flags[(result.level, result.problem)])
            writer.write(result)
            results.append(result)
            pm.hook.kz_result_filed(result=result)
            if on_result:
                on_result(result)
    finally:
        writer.close()
        if own:
            pool.close()
    return results
