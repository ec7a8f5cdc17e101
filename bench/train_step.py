"""Seconds per Coder GRPO step, split into generation / evaluation / update, and rollouts per minute.

A model built from a config (random weights: no download) is trained for a few CA-GRPO steps on built-in
level-1 tasks; the evaluator pool scores the completions. Generation is timed by wrapping the model's
``generate``, evaluation inside the reward function; update = step time - generation - evaluation.

    python -m bench run train_step --model tiny --steps 3 --out bench/results/train-step-cpu.json      (CPU)
    python -m bench run train_step --model smollm2-config --steps 5 --out $OUT/train-step.json          (GPU)
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import Terminated, cut_short, scratch_dir, sigterm_raises, write_json_atomic  # noqa: E402


def build_model(kind: str, path: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from tests.tinymodel import build_tiny_checkpoint

    if kind == "tiny":
        return build_tiny_checkpoint(path)
    if kind == "smollm2-config":  # SmolLM2-135M's shape, random weights, a tokenizer trained here
        return build_tiny_checkpoint(path, context=8192, vocab_size=2048, hidden=576)
    return Path(kind)  # a checkpoint directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny", help="tiny | smollm2-config | a checkpoint directory")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--prompts-per-step", type=int, default=2)
    parser.add_argument("--max-completion-length", type=int, default=128)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import torch

    cuda = torch.cuda.is_available()
    work = Path(scratch_dir("kz-train-step-"))
    state: dict = {"args": args, "cuda": cuda, "work": work, "generation_s": []}
    try:
        with sigterm_raises():
            train(args, state)
    except (Terminated, KeyboardInterrupt) as exc:
        return cut_short("train_step.py", args.out, exc, lambda: train_step_report(state, partial=True))
    report = train_step_report(state, partial=False)
    print(json.dumps(report, indent=2))
    if args.out:
        write_json_atomic(args.out, report)
    return 0


def train(args, state: dict) -> None:
    """The model built and trained for ``args.steps`` CA-GRPO steps, generation timed; fills ``state``
    (``settings``, ``trainer``, ``t0``, ``generation_s`` as it goes, ``total`` at the end). The evaluator pool is
    closed however it ends."""
    import torch

    from kzcore.executors.local import LocalPool
    from kzcore.plugins import get_plugin_manager, plugin_specs
    from kzcore.problems import load_problems
    from kzcore.prompts import build_prompt
    from kzcore.train.ca_grpo import CAGRPOConfig
    from kzcore.train.coder import CoderReward, GRPOSettings, grpo_config, task_dataset
    from kzcore.types import EvalConfig

    cuda, work = state["cuda"], state["work"]
    model_dir = build_model(args.model, work / "model")
    pm = get_plugin_manager()
    coder_prompt = functools.partial(build_prompt, language="triton", template="kernelbench", pm=pm)  # the trainer's
    problems = load_problems("builtin:1")[: args.steps * args.prompts_per_step]
    config = EvalConfig(trials=2, timeout_s=60)
    pool = LocalPool(workers=args.workers, config=config, plugins=plugin_specs(pm))
    try:
        pool.start()
        reward = CoderReward(problems, "triton", pool, config, CAGRPOConfig(), work / "rewards.jsonl")
        settings = state["settings"] = GRPOSettings(
            max_steps=args.steps, num_generations=args.generations, batch_size=args.generations * args.prompts_per_step,
            max_completion_length=args.max_completion_length, use_cpu=not cuda,
        )  # fmt: skip
        from trl import GRPOTrainer

        trainer = GRPOTrainer(
            model=str(model_dir), reward_funcs=[reward], args=grpo_config(settings, work / "out"),
            train_dataset=task_dataset(problems, coder_prompt),
        )  # fmt: skip
        state["trainer"] = trainer
        generation_s = state["generation_s"]
        original = trainer.model.generate

        def timed_generate(*a, **kw):
            t = time.perf_counter()
            out = original(*a, **kw)
            if cuda:
                torch.cuda.synchronize()
            generation_s.append(time.perf_counter() - t)
            return out

        trainer.model.generate = timed_generate
        t0 = state["t0"] = time.perf_counter()
        trainer.train()
        state["total"] = time.perf_counter() - t0
    finally:
        pool.close()


def _reward_rows(path: Path) -> list[dict]:
    """The reward function's rows (one per scored batch); none before the first; a last line cut in the middle
    of its write (a run cut short) left out."""
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def train_step_report(state: dict, partial: bool) -> dict:
    """The report from ``state`` (`train`): complete, or what a run cut short had (the steps done, the reward
    rows written; figures None where there is nothing to divide)."""
    import torch

    from kzcore.results import package_versions

    args, settings, trainer = state["args"], state.get("settings"), state.get("trainer")
    rows = _reward_rows(state["work"] / "rewards.jsonl")
    total = state.get("total")
    if total is None and "t0" in state:  # cut short while training: its seconds so far
        total = time.perf_counter() - state["t0"]
    steps = trainer.state.global_step if trainer is not None else 0
    gen, ev = sum(state["generation_s"]), sum(r["eval_seconds"] for r in rows)
    batch_size = settings.batch_size if settings is not None else None
    rollouts = steps * batch_size if batch_size else 0

    def per_step(seconds):
        return round(seconds / steps, 3) if steps and seconds is not None else None

    return {
        "bench": "train_step",
        "partial": partial,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": platform.node(),
        "device": torch.cuda.get_device_name() if state["cuda"] else "cpu",
        "packages": package_versions(),
        "model": args.model,
        "params": sum(p.numel() for p in trainer.model.parameters()) if trainer is not None else None,
        "steps": steps,
        "completions_per_step": batch_size,
        "max_completion_length": settings.max_completion_length if settings is not None else None,
        "seconds_per_step": per_step(total),
        "generation_s_per_step": per_step(gen),
        "evaluation_s_per_step": per_step(ev),
        "update_s_per_step": per_step(total - gen - ev if total is not None else None),
        "rollouts_per_min": round(60 * rollouts / total, 2) if total else None,
        "reward_mean": statistics.fmean(r["reward_mean"] for r in rows) if rows else None,
        "statuses": [r["statuses"] for r in rows],
    }


if __name__ == "__main__":
    sys.exit(main())
