"""Run in 2 processes (gloo, CPU) by tests/test_ca_grpo.py: each rank gets an interleaved half of every
group and writes its rewards; or (``coder-reward``) each rank scores its half of a batch through CoderReward
with a fake pool whose verdict is spelled in the completion text."""

import json
import os
import sys

import torch.distributed as dist

from kzcore.train.ca_grpo import CAGRPOConfig, Verdict, distributed_ca_grpo_rewards
from kzcore.types import EvalResult


class VerdictInTextPool:
    """An executor whose verdict for a candidate is its completion text: "correct" (2x speedup) or not."""

    def map(self, jobs):
        out = []
        for job in jobs:
            c = job.candidate
            ok = c.completion == "correct"
            out.append(
                EvalResult(
                    c.problem,
                    c.level,
                    c.language,
                    c.sample,
                    "correct" if ok else "incorrect",
                    speedup=2.0 if ok else None,
                )
            )
        return out


def coder_reward(rank: int, out_path: str) -> None:
    import tempfile
    from pathlib import Path

    from kzcore.plugins import new_plugin_manager
    from kzcore.problems import load_problems
    from kzcore.train.coder import CoderReward
    from kzcore.types import EvalConfig

    # the test's KZ_LOAD_PLUGINS="" reaches this process too: the builtin suite (a plugin) is named here
    suite = new_plugin_manager(load_entry_points=False, extra=["kz_suites"])
    problems = [p for p in load_problems("builtin:1", pm=suite) if p.name == "1_ReLU"]
    log = Path(tempfile.mkdtemp()) / "rewards.jsonl"
    reward = CoderReward(problems, "triton", VerdictInTextPool(), EvalConfig(), CAGRPOConfig(tau=0.75), log)
    # the batch: prompt 0 (task 0) x 2 generations, prompt 1 (task 1) x 2; each rank holds one of each
    rewards = reward(
        prompts=[[], []],
        completions=["correct", "wrong"],
        problem=["1_ReLU", "1_ReLU"],
        level=[1, 1],
        task_id=["0", "1"],
    )
    row = json.loads(log.read_text())
    with open(out_path, "w") as f:
        json.dump({"rewards": rewards, "group_correct_rates": row["group_correct_rates"], "tally": reward.tally}, f)


def main(rank: int, world: int, port: str, data_path: str, out_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if data_path == "coder-reward":
        coder_reward(rank, out_path)
        dist.destroy_process_group()
        return
    rows = json.loads(open(data_path).read())
    mine = [Verdict(**r) for i, r in enumerate(rows) if i % world == rank]
    rewards = distributed_ca_grpo_rewards(mine, CAGRPOConfig(tau=0.5, speed="rank"))
    with open(out_path, "w") as f:
        json.dump(rewards, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
