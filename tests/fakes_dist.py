"""Run in 2 processes (gloo, CPU) by tests/test_ca_grpo.py: each rank gets an interleaved half of every
group and writes its rewards."""

import json
import os
import sys

import torch.distributed as dist

from kzcore.train.ca_grpo import CAGRPOConfig, Verdict, distributed_ca_grpo_rewards


def main(rank: int, world: int, port: str, data_path: str, out_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    rows = json.loads(open(data_path).read())
    mine = [Verdict(**r) for i, r in enumerate(rows) if i % world == rank]
    rewards = distributed_ca_grpo_rewards(mine, CAGRPOConfig(tau=0.5, speed="rank"))
    with open(out_path, "w") as f:
        json.dump(rewards, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
