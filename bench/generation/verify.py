"""Before/after the fix, on shapes never seen before in the process (disjoint prompt lengths per run):
HFPolicy.generate (kz_models) and kzcore.train.coder.run_grpo (TRL GRPOTrainer)."""

import contextlib
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe import StepClock, build, host_speed, log  # noqa

from kz_models import hf
from kz_models.hf import HFPolicy
from kzcore.policy import SamplingParams
from kzcore.train import coder

FIXED_CTX, FIXED_WRAP = hf.decoding_attention, coder.without_cudnn_attention


CUDA = torch.cuda.is_available()


def sync():
    if CUDA:
        torch.cuda.synchronize()


def chat(words):
    return [{"role": "user", "content": "Write a fast Triton kernel. " + " ".join(["tensor"] * words)}]


def set_fix(on):
    hf.decoding_attention = FIXED_CTX if on else contextlib.nullcontext
    coder.without_cudnn_attention = FIXED_WRAP if on else (lambda g: g)


if CUDA:
    host_speed()
    path = build(Path(tempfile.mkdtemp()) / "smol")
else:
    from tests.tinymodel import build_tiny_checkpoint

    path = build_tiny_checkpoint(Path(tempfile.mkdtemp()) / "tiny")
policy = HFPolicy.from_path(path, device="cuda" if CUDA else "cpu", batch_size=64)
policy.eos_ids = frozenset()
policy.model.generation_config.eos_token_id = None
clock = StepClock(policy.model)
policy.generate([chat(5)], SamplingParams(n=2, temperature=0.7, max_new_tokens=8, seed=0))
words = 300
for on, rows in [(False, 16), (True, 16), (False, 40), (True, 40)]:
    set_fix(on)
    c = chat(words)
    words += 450  # next run: prompt ~450 tokens longer, so its KV lengths were never seen
    clock.reset()
    sync()
    t = time.perf_counter()
    policy.generate([c], SamplingParams(n=rows, temperature=0.7, max_new_tokens=384 if CUDA else 16, seed=0))
    sync()
    log(f"policy_fix{int(on)}_rows{rows}_prompt{len(policy.encode(c))}", clock.summary(time.perf_counter() - t))
policy.model.forward = clock.orig
policy.close()

import trl  # noqa: E402 (after the policy half, which needs no TRL)
from datasets import Dataset  # noqa: E402

Base = trl.GRPOTrainer


class Timed(Base):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.eos_token_ids = [-1]
        self.generation_config.eos_token_id = None
        self.generation_config.min_new_tokens = self.generation_config.max_new_tokens
        m, orig = self.model, self.model.generate
        self.clock = StepClock(m)

        def gen(*a, **kw):
            self.clock.reset()
            sync()
            t = time.perf_counter()
            out = orig(*a, **kw)
            sync()
            log(
                f"{TAG}_generate{len(RUNS)}",
                {
                    **self.clock.summary(time.perf_counter() - t),
                    "cudnn_sdp_inside": torch.backends.cuda.cudnn_sdp_enabled(),
                },
            )
            RUNS.append(1)
            return out

        m.generate = gen


trl.GRPOTrainer = Timed
for on, base_words in [(False, 300), (True, 1100)]:
    set_fix(on)
    TAG, RUNS = f"grpo_fix{int(on)}", []
    ds = Dataset.from_list([{"prompt": chat(base_words + 25 * i)} for i in range(4)])
    settings = coder.GRPOSettings(
        max_steps=2,
        num_generations=8,
        batch_size=16,
        max_completion_length=256 if CUDA else 8,
        use_cpu=not CUDA,
        temperature=0.8,
        learning_rate=1e-5,
    )
    t = time.perf_counter()
    m = coder.run_grpo(
        str(path), ds, [lambda prompts, completions, **kw: [0.0] * len(completions)], settings, Path(tempfile.mkdtemp())
    )
    log(
        f"{TAG}_phase",
        {"train_seconds": m["train_seconds"], "cudnn_sdp_after": torch.backends.cuda.cudnn_sdp_enabled()},
    )
