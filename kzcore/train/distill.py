"""Cold-start distillation: a teacher (any policy, prompted with the four principles: tiling, fusion,
pipelining, reordering) writes kernels; the evaluator keeps the correct ones (optionally only those faster
than eager; sampling and evaluating are kzcore.evaluate.policy_eval's); they become a chat-format SFT dataset
(prompt/completion rows, with provenance).

A suite's shipped reference solutions can stand in for the teacher (``solutions="builtin"``): that is what
the CPU smoke run uses, since no large teacher fits there. ``variants=N`` adds up to N generated variant
problems with their own solutions (kzcore/train/variants.py), verified the same way; held-out names in
``exclude`` remove the variants derived from them."""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from pathlib import Path

import attrs

from kzcore.evaluate.policy_eval import evaluate_policy
from kzcore.evaluate.runner import evaluate
from kzcore.metrics import is_faster
from kzcore.plugins import get_plugin_manager
from kzcore.policy import Policy, SamplingParams
from kzcore.problems import load_solutions
from kzcore.prompts import build_prompt
from kzcore.train import variants as variant_gen
from kzcore.types import Candidate, EvalConfig, EvalResult, Problem


@attrs.frozen
class DistillSummary:
    candidates: int
    correct: int
    kept: int
    dataset: str
    results: str
    note: str = ""
    # language → {"generated": after exclusion, "evaluated": chosen, "verified": correct, "kept": rows}
    variants: dict[str, dict[str, int]] = attrs.field(factory=dict)


def _fenced(source: str) -> str:
    return f"```python\n{source.rstrip()}\n```"


def _answer(candidate: Candidate, pm, keep_reasoning: bool = True) -> str:
    """The assistant turn to train on: the completion as the teacher wrote it (reasoning and code), or with
    ``keep_reasoning=False`` only its code as the evaluator extracts it, fenced; a ready source fenced."""
    if candidate.completion is None:
        return _fenced(candidate.source)
    if keep_reasoning:
        return candidate.completion
    return _fenced(pm.hook.kz_extract_source(language=candidate.language, completion=candidate.completion))


def keep(result: EvalResult, only_faster: bool) -> bool:
    """Correct on a problem the check did not flag (`EvalResult.verified`), and with ``only_faster`` faster than
    eager by fast_1's rule (parity within noise is not)."""
    return result.verified and (not only_faster or is_faster(result, 1.0))


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
    executor="local",
    variants: int | None = 0,
    variant_seed: int = 0,
    exclude: list[str] | tuple[str, ...] = (),
    keep_reasoning: bool = True,
    max_new_tokens: int = 4096,
    pm=None,
    drop_variants: Collection[str] = (),
    chains: int = 0,
) -> DistillSummary:
    """Write ``out_dir/sft.jsonl`` from the verified teacher outputs and, with ``variants=N``, from up to N
    verified variant problems (chosen by ``variant_seed``, none derived from the names in ``exclude`` and none
    named in ``drop_variants``), and with ``chains=M`` from up to M chains of two elementwise ops (drawn by the
    same seed, with the same exclusions); returns counts and paths."""
    if (teacher is None) == (solutions is None):
        raise ValueError("distill needs exactly one of teacher= or solutions=")
    pm = pm or get_plugin_manager()
    out_dir.mkdir(parents=True, exist_ok=True)
    generated, pool = _variants(problems, languages, solutions, variants, variant_seed, exclude, pm, drop_variants)
    linked = allowed_chains(languages, chains, variant_seed, exclude, pm, drop_variants)
    generated, pool = generated + linked, pool + linked
    by_variant = {v.name: v for v in pool}
    all_problems = problems + [v.problem for v in pool]
    by_key = {(p.level, p.name): p for p in all_problems}
    rows, n_cand, n_correct = [], 0, 0
    note = ""
    counts: dict[str, dict[str, int]] = {}
    for language in languages:
        variant_pairs = [(v.problem, c) for v in pool if (c := v.candidate(language)) is not None]
        extra = [c for _, c in variant_pairs]
        results_file = out_dir / f"results-{language}.jsonl"
        if teacher is not None:  # the teacher's kernels and the variants' solutions, judged in one results file
            params = params or SamplingParams(n=k, temperature=0.8, max_new_tokens=max_new_tokens)
            evaluation = evaluate_policy(
                teacher, problems, language, params, config, out_dir / f"teacher-{language}.jsonl", results_file,
                template=template, executor=executor, workers=workers, extra=variant_pairs, pm=pm,
            )  # fmt: skip
            candidates, results = evaluation.candidates + extra, evaluation.results
        else:
            candidates = load_solutions(solutions, problems, language, pm=pm) + extra
            results = evaluate(
                all_problems, candidates, config, results_file, executor=executor, workers=workers, pm=pm
            )
        verdicts = {r.key: r for r in results}
        n_cand += len(candidates)
        n_correct += sum(r.correct for r in results)
        if only_faster and not any(r.speedup for r in results):
            note = "only_faster asked for, but nothing was timed (no GPU): nothing kept"
        if variants or chains:
            counts[language] = {
                "generated": sum(language in v.solutions for v in generated),
                "evaluated": len(extra),
                "verified": sum(verdicts[c.key].correct for c in extra if c.key in verdicts),
                "kept": 0,
            }
        for cand in candidates:
            result = verdicts.get(cand.key)
            if result is None or not keep(result, only_faster):
                continue
            problem = by_key[(cand.level, cand.problem)]
            variant = by_variant.get(cand.problem)
            if variant is not None:
                counts[language]["kept"] += 1
            rows.append(
                {
                    "prompt": build_prompt(problem, language, template, pm=pm),
                    "completion": [{"role": "assistant", "content": _answer(cand, pm, keep_reasoning)}],
                    "problem": problem.name,
                    "level": problem.level,
                    "language": language,
                    "provenance": {
                        "teacher": _teacher_name(teacher, solutions, variant),
                        "origin": cand.origin,
                        "variant": variant.name if variant else None,
                        "variant_kind": variant.kind if variant else None,
                        "variant_of": variant.origin if variant else None,
                        "sample": cand.sample,
                        "speedup": result.speedup,
                        "template": template,
                        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    },
                }  # fmt: skip
            )
    dataset = out_dir / "sft.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_verified_problems(out_dir / PROBLEMS_FILE, all_problems, rows)
    return DistillSummary(n_cand, n_correct, len(rows), str(dataset), str(out_dir), note, counts)


PROBLEMS_FILE = "problems.jsonl"  # the problems the SFT set holds a verified solution to (trainer tasks "coldstart")


def write_verified_problems(path: Path, problems: list[Problem], rows: list[dict]) -> None:
    """One JSONL problem per problem that has at least one SFT row: ``name``, ``level``, ``code``, the
    ``languages`` it was verified in and, per language, the length in characters of its shortest verified
    answer (``solution_chars``, what ``[problems] task_max_solution_chars`` reads): the suite behind
    ``[problems] tasks = "coldstart"``."""
    shortest: dict[tuple[int, str], dict[str, int]] = {}
    for row in rows:
        chars = len(row["completion"][-1]["content"])
        known = shortest.setdefault((row["level"], row["problem"]), {})
        known[row["language"]] = min(chars, known.get(row["language"], chars))
    lines = [
        {
            "name": p.name,
            "level": p.level,
            "code": p.source,
            "languages": sorted(shortest[(p.level, p.name)]),
            "solution_chars": shortest[(p.level, p.name)],
        }
        for p in problems
        if (p.level, p.name) in shortest
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _teacher_name(teacher: Policy | None, solutions: str | None, variant) -> str | None:
    if variant is not None:
        return f"variants:{variant.kind}"
    return getattr(teacher, "name", None) if teacher else f"solutions:{solutions}"


def allowed_variants(problems, languages, solutions, exclude, pm=None, drop=()) -> list[variant_gen.Variant]:
    """Every variant of ``problems`` distillation may choose from: none derived from a held-out name in
    ``exclude`` (kzcore.train.variants.exclude_heldout), none named in ``drop``."""
    suite = solutions if solutions and not Path(solutions).exists() else "builtin"
    generated = variant_gen.generate(problems, languages, suite=suite, pm=pm)
    return [v for v in variant_gen.exclude_heldout(generated, list(exclude)) if v.name not in drop]


def allowed_chains(languages, count, seed, exclude, pm=None, drop=()) -> list[variant_gen.Variant]:
    """The ``count`` chains drawn by ``seed`` (kzcore.train.variants.chain_variants), less any held out by name
    in ``exclude`` or named in ``drop``."""
    chains = variant_gen.chain_variants(list(languages), count, seed, pm=pm)
    return [v for v in variant_gen.exclude_heldout(chains, list(exclude)) if v.name not in drop]


def _variants(problems, languages, solutions, count, seed, exclude, pm, drop=()):
    """(every allowed variant, the at most ``count`` of them chosen by ``seed``)."""
    if not count:
        return [], []
    allowed = allowed_variants(problems, languages, solutions, exclude, pm, drop)
    return allowed, variant_gen.choose(allowed, count, seed)
