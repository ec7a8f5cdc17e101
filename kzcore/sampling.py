"""Asking a policy for candidate solutions: prompts through the prompt hooks, completions streamed to a
JSONL file (one row per sample, the same rows `--solutions FILE.jsonl` reads back), resumable."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from kzcore.jsonl import OnSkip, open_for_append, read_jsonl
from kzcore.policy import Policy, SamplingParams
from kzcore.prompts import build_prompt
from kzcore.types import Candidate, Problem


def prompt_sha(messages: list[dict[str, str]]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def read_completions(path: Path, *, on_skip: OnSkip | None = None) -> list[dict]:
    """The completion rows of ``path``; a torn last line from an interrupted run is skipped and reported."""
    return [row for row in read_jsonl(path, on_skip=on_skip) if "completion" in row]


def sample_candidates(
    policy: Policy,
    problems: list[Problem],
    language: str,
    params: SamplingParams,
    out: Path,
    template: str = "kernelbench",
    batch_size: int = 8,
    on_batch: Callable[[int], None] | None = None,
    pm=None,
) -> list[Candidate]:
    """``params.n`` candidates per problem. Problems whose samples are already in ``out`` are not asked
    again; the others are asked ``batch_size`` prompts a call, shortest prompts first, and their rows are
    appended and flushed after each call. A file this call created is removed again when it ends empty
    (interrupted before the first batch came back)."""
    existed = out.exists()
    try:
        with open_for_append(out) as f:  # a torn last line is cut (and reported) before anything reads it
            done = {(r["level"], r["problem"]) for r in read_completions(out) if r.get("language") == language}
            todo = [(p, build_prompt(p, language, template, pm=pm)) for p in problems if (p.level, p.name) not in done]
            # prompts of similar length decode together: a batch is padded to its longest prompt and decodes until
            # its longest row ends, so mixing KernelBench's short level-1 prompts with long level-2 ones in one
            # call makes every row pay for the longest
            todo.sort(key=lambda item: sum(len(m.get("content", "")) for m in item[1]))
            for start in range(0, len(todo), batch_size):
                batch = [p for p, _ in todo[start : start + batch_size]]
                prompts = [chat for _, chat in todo[start : start + batch_size]]
                for problem, chat, completions in zip(batch, prompts, policy.generate(prompts, params)):
                    for c in completions:
                        row = {
                            "problem": problem.name, "level": problem.level, "language": language,
                            "sample": c.sample_index, "completion": c.text, "finish_reason": c.finish_reason,
                            "policy": getattr(policy, "name", type(policy).__name__), "template": template,
                            "prompt_sha": prompt_sha(chat),
                        }  # fmt: skip
                        if c.token_ids is not None:  # generated tokens, for the cost of a sampling run
                            row["tokens"] = len(c.token_ids)
                        f.write(json.dumps(row) + "\n")
                f.flush()
                if on_batch:
                    on_batch(len(batch))
    finally:
        if not existed and out.exists() and out.stat().st_size == 0:
            out.unlink()
    keep = {(p.level, p.name) for p in problems}
    return [
        Candidate(
            problem=r["problem"],
            language=language,
            level=r["level"],
            sample=r["sample"],
            completion=r["completion"],
            origin=f"{out}",
        )  # fmt: skip
        for r in read_completions(out)
        if r.get("language") == language and (r["level"], r["problem"]) in keep
    ]
