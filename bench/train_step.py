"""Seconds per Coder GRPO step, split into generation / evaluation / update, and rollouts per minute.

A model built from a config (random weights: no download) is trained for a few CA-GRPO steps on built-in
level-1 tasks; the evaluator pool scores the completions. Generation is timed by wrapping the model's
``generate``, evaluation inside the reward function; update = step time - generation - evaluation.

    python bench/train_step.py --model tiny --steps 3 --out bench/results/train-step-cpu.json      (CPU)
    python bench/train_step.py --model smollm2-config --steps 5 --out $OUT/train-step.json          (GPU)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_model(kind: str, path: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from tests.tinymodel import build_tiny_checkpoint

    if kind == "tiny":
        return build_tiny_checkpoint(path)
    if kind == "smollm2-config":  # SmolLM2-135M's shape, random weights, a tokenizer trained here
        return build_tiny_checkpoint(path, context=8192, vocab_size=2048, hidden=576)
    return Path(kind)  # a checkpoint directory


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny", help="tiny | smollm2-config | a checkpoint directory")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--prompts-per-step", type=int, default=2)
    parser.add_argument("--max-completion-length", type=int, default=128)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import torch

    from kzcore.executors.local import LocalPool
    from kzcore.plugins import get_plugin_manager, plugin_specs
    from kzcore.problems import load_problems
    from kzcore.results import package_versions
    from kzcore.train.ca_grpo import CAGRPOConfig
    from kzcore.train.coder import CoderReward, GRPOSettings, grpo_config, task_dataset
    from kzcore.types import EvalConfig

    cuda = torch.cuda.is_available()
    work = Path(tempfile.mkdtemp(prefix="kz-train-step-"))
    model_dir = build_model(args.model, work / "model")
    pm = get_plugin_manager()
    problems = load_problems("builtin:1")[: args.steps * args.prompts_per_step]
    config = EvalConfig(trials=2, timeout_s=60)
    pool = LocalPool(workers=args.workers, config=config, plugins=plugin_specs(pm)).start()
    reward = CoderReward(problems, "triton", pool, config, CAGRPOConfig(), work / "rewards.jsonl")
    settings = GRPOSettings(
        max_steps=args.steps, num_generations=args.generations, batch_size=args.generations * args.prompts_per_step,
        max_completion_length=args.max_completion_length, use_cpu=not cuda,
    )  # fmt: skip
    from trl import GRPOTrainer

    trainer = GRPOTrainer(
        model=str(model_dir), reward_funcs=[reward], args=grpo_config(settings, work / "out"),
        train_dataset=task_dataset(problems, "triton", "kernelbench", pm),
    )  # fmt: skip
    generation_s = []
    original = trainer.model.generate

    def timed_generate(*a, **kw):
        t = time.perf_counter()
        out = original(*a, **kw)
        if cuda:
            torch.cuda.synchronize()
        generation_s.append(time.perf_counter() - t)
        return out

    trainer.model.generate = timed_generate
    t0 = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - t0
    pool.close()
    rows = [json.loads(x) for x in (work / "rewards.jsonl").read_text().splitlines()]
    steps = trainer.state.global_step
    gen, ev = sum(generation_s), sum(r["eval_seconds"] for r in rows)
    rollouts = steps * settings.batch_size
    report = {
        "bench": "train_step",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": platform.node(),
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "packages": package_versions(),
        "model": args.model,
        "params": sum(p.numel() for p in trainer.model.parameters()),
        "steps": steps,
        "completions_per_step": settings.batch_size,
        "max_completion_length": settings.max_completion_length,
        "seconds_per_step": round(total / steps, 3),
        "generation_s_per_step": round(gen / steps, 3),
        "evaluation_s_per_step": round(ev / steps, 3),
        "update_s_per_step": round((total - gen - ev) / steps, 3),
        "rollouts_per_min": round(60 * rollouts / total, 2),
        "reward_mean": statistics.fmean(r["reward_mean"] for r in rows) if rows else None,
        "statuses": [r["statuses"] for r in rows],
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
