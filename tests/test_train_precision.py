"""On a CPU every path that loads a model to train (SFT, GRPO for the Coder and the Proposer, the bench's step)
or to sample (the hf policy, which the smollm2 policy, distillation teachers and the trainer's held-out
evaluation use) holds it in fp32 and computes in fp32, whatever dtype the checkpoint's config names: the
embedded model's converted checkpoint says bfloat16, and bf16 on a 2-core CPU makes the demo's SFT ~11x
slower. The model here is a tiny one saved in bf16, so its config says bfloat16 as the embedded one's does."""

from __future__ import annotations

import json

import pytest

from kzcore.train.precision import model_dtype, trainer_precision
from tests.tinymodel import build_tiny_checkpoint


@pytest.fixture(scope="module")
def bf16_tiny(tmp_path_factory):
    import torch
    from transformers import AutoModelForCausalLM

    path = build_tiny_checkpoint(tmp_path_factory.mktemp("bf16-tiny"))
    AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(torch.bfloat16).save_pretrained(path)
    assert json.loads((path / "config.json").read_text())["dtype"] == "bfloat16"
    # the trap: transformers loads a checkpoint in its config's dtype when it is not told one
    assert AutoModelForCausalLM.from_pretrained(path).dtype == torch.bfloat16
    return path


def dtype_probe():
    """A TrainerCallback recording, from the start of training, the dtypes of the model's parameters and of
    every Linear layer's output in each forward (generation's and the update's): bf16 autocast shows there even
    when the weights are fp32."""
    import torch
    from transformers import TrainerCallback

    class DtypeProbe(TrainerCallback):
        def __init__(self):
            self.params: set = set()
            self.outputs: set = set()
            self.steps = 0

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self.params = {p.dtype for p in model.parameters()}
            for module in model.modules():
                if isinstance(module, torch.nn.Linear):
                    module.register_forward_hook(lambda mod, inputs, out: self.outputs.add(out.dtype))

        def on_step_end(self, args, state, control, **kwargs):
            self.steps += 1

    return DtypeProbe()


def test_the_one_rule():
    import torch

    assert model_dtype("cpu") == torch.float32 and model_dtype("cuda:1") == torch.bfloat16
    assert model_dtype("cpu", "bfloat16") == torch.bfloat16  # asked for by name: given
    cpu = trainer_precision(use_cpu=True)
    assert cpu["bf16"] is False and cpu["fp16"] is False and cpu["model_init_kwargs"] == {"dtype": "float32"}


def test_sft_on_a_cpu_holds_and_computes_fp32(bf16_tiny, tmp_path, one_torch_thread, training):
    import torch

    from kzcore.train.sft import SFTSettings, run_sft

    data = tmp_path / "sft.jsonl"
    row = {"prompt": [{"role": "user", "content": "relu"}], "completion": [{"role": "assistant", "content": "x"}]}
    data.write_text(json.dumps(row) + "\n")
    probe = dtype_probe()
    settings = SFTSettings(max_steps=1, batch_size=1, max_length=128, use_cpu=True)
    metrics = run_sft(str(bf16_tiny), data, tmp_path / "out", settings, callbacks=(probe,))
    assert metrics["steps"] == 1 and probe.steps == 1
    assert probe.params == {torch.float32} and probe.outputs == {torch.float32}


def test_grpo_on_a_cpu_holds_computes_and_generates_fp32(bf16_tiny, tmp_path, plugins, one_torch_thread, training):
    import torch
    from datasets import Dataset

    from kzcore.train.coder import GRPOSettings, run_grpo

    def zero(prompts, completions, **kwargs):
        return [0.0] * len(completions)

    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"task {i}"}]} for i in range(2)])
    settings = GRPOSettings(max_steps=1, num_generations=2, batch_size=2, max_completion_length=8, use_cpu=True)
    probe = dtype_probe()
    metrics = run_grpo(str(bf16_tiny), dataset, [zero], settings, tmp_path / "out", pm=plugins(), callbacks=(probe,))
    assert metrics["steps"] == 1 and metrics["generation_seconds"] is not None  # the model generated too
    assert probe.params == {torch.float32} and probe.outputs == {torch.float32}


def test_the_bench_step_config_is_fp32_on_a_cpu(tmp_path):
    """bench/train_step.py builds its GRPOTrainer from grpo_config, as the phases do."""
    from kzcore.train.coder import GRPOSettings, grpo_config

    args = grpo_config(GRPOSettings(use_cpu=True), tmp_path)
    assert args.bf16 is False and args.model_init_kwargs == {"dtype": "float32"}


def test_the_hf_policy_samples_in_fp32_on_a_cpu(bf16_tiny, plugins):
    import torch

    from kzcore.policy import SamplingParams, load_policy

    plugins("kz_models")
    policy = load_policy(f"hf:{bf16_tiny}?device=cpu")
    try:
        assert {p.dtype for p in policy.model.parameters()} == {torch.float32}
        (completions,) = policy.generate([[{"role": "user", "content": "hi"}]], SamplingParams(max_new_tokens=4))
        assert completions[0].finish_reason in ("stop", "length")
    finally:
        policy.close()


def test_the_embedded_models_policy_samples_in_fp32_on_a_cpu(bf16_tiny, plugins, monkeypatch):
    """`smollm2` loads its converted checkpoint (bf16 in its config, as here) through the same loader."""
    import torch

    from kz_models import smollm2
    from kzcore.policy import load_policy

    plugins("kz_models")
    monkeypatch.setattr(smollm2, "ensure_checkpoint", lambda: bf16_tiny)
    policy = load_policy("smollm2:device=cpu")
    try:
        assert {p.dtype for p in policy.model.parameters()} == {torch.float32}
    finally:
        policy.close()
