"""Cold-start distillation: a teacher (any policy, prompted with the four principles: tiling, fusion,
pipelining, reordering) writes kernels; the evaluator keeps the correct ones (optionally only those faster
than eager); they become a chat-format SFT dataset (prompt/completion rows, with provenance).

A suite's shipped reference solutions can stand in for the teacher (``solutions="builtin"``): that is what
the CPU smoke run uses, since no large teacher fits there."""

from __future__ import annotations

import json
import time
from pathlib import Path

import attrs

from kzcore.evaluate.runner import evaluate
from kzcore.policy import Policy, SamplingParams
from kzcore.problems import load_solutions
from kzcore.prompts import build_prompt
from kzcore.sampling import sample_candidates
from kzcore.types import Candidate, EvalConfig, EvalResult, Problem


@attrs.frozen
class DistillSummary:
    candidates: int
    correct: int
    kept: int
    dataset: str
    results: str
    note: str = ""


def _answer(candidate: Candidate, pm) -> str:
    """The assistant turn to train on: the completion as the teacher wrote it, or a ready source fenced."""
    if candidate.completion is not None:
        return candidate.completion
    return f"```python\n{candidate.source.rstrip()}\n```"


def keep(result: EvalResult, only_faster: bool) -> bool:
    if not result.correct:
        return False
    return not only_faster or (result.speedup is not None and result.speedup > 1.0)


def distill(
    problems: list[Problem],
    languages: list[str],
    out_dir: Path,
    config: EvalConfig,
    teacher: Policy | None = None,
    solutions: str | None = None,
    k: int = 4,
    params: SamplingParams | None = None,
    only_faster: bool = False,
    template: str = "principles",
    workers: int | None = None,
    pm=None,
) -> DistillSummary:
    """Write ``out_dir/sft.jsonl`` from the verified teacher outputs; returns counts and paths."""
    if (teacher is None) == (solutions is None):
        raise ValueError("distill needs exactly one of teacher= or solutions=")
    out_dir.mkdir(parents=True, exist_ok=True)
    by_key = {(p.level, p.name): p for p in problems}
    rows, n_cand, n_correct = [], 0, 0
    note = ""
    for language in languages:
        if teacher is not None:
            params = params or SamplingParams(n=k, temperature=0.8)
            candidates = sample_candidates(
                teacher, problems, language, params, out_dir / f"teacher-{language}.jsonl", template=template, pm=pm
            )
        else:
            candidates = load_solutions(solutions, problems, language, pm=pm)
        results = evaluate(problems, candidates, config, out_dir / f"results-{language}.jsonl", workers=workers, pm=pm)
        verdicts = {r.key: r for r in results}
        n_cand += len(candidates)
        n_correct += sum(r.correct for r in results)
        if only_faster and not any(r.speedup for r in results):
            note = "only_faster asked for, but nothing was timed (no GPU): nothing kept"
        for cand in candidates:
            result = verdicts.get(cand.key)
            if result is None or not keep(result, only_faster):
                continue
            problem = by_key[(cand.level, cand.problem)]
            rows.append(
                {
                    "prompt": build_prompt(problem, language, template, pm=pm),
                    "completion": [{"role": "assistant", "content": _answer(cand, pm)}],
                    "problem": problem.name,
                    "level": problem.level,
                    "language": language,
                    "provenance": {
                        "teacher": getattr(teacher, "name", None) if teacher else f"solutions:{solutions}",
                        "origin": cand.origin,
                        "sample": cand.sample,
                        "speedup": result.speedup,
                        "template": template,
                        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    },
                }  # fmt: skip
            )
    dataset = out_dir / "sft.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return DistillSummary(n_cand, n_correct, len(rows), str(dataset), str(out_dir), note)
