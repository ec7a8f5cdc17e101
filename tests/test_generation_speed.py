"""Generation's per-step cost: our two generation paths (the hf policy's ``generate`` and TRL's GRPO
generation through ``run_grpo``) decode with the KV cache and with cuDNN's attention backend switched off.

cuDNN's scaled-dot-product attention builds an execution graph for every new sequence length, and decoding
meets a new one each step: on an H200, SmolLM2-135M took ~100 ms a step with it and ~30 ms without. A CPU
never runs cuDNN attention, so these tests check the backend flags the model's forward runs under."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kzcore.policy import SamplingParams

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_hf_policy_decodes_with_the_kv_cache_and_without_cudnn_attention(tmp_path):
    from kz_models.hf import HFPolicy
    from tests.tinymodel import build_tiny_checkpoint

    policy = HFPolicy.from_path(build_tiny_checkpoint(tmp_path / "tiny", context=256), device="cpu", batch_size=4)
    policy.eos_ids = frozenset()  # every row runs to max_new_tokens
    policy.model.generation_config.eos_token_id = None
    seen = []
    forward = policy.model.forward

    def recording_forward(*args, **kwargs):
        seen.append((kwargs["input_ids"].shape[1], torch.backends.cuda.cudnn_sdp_enabled()))
        return forward(*args, **kwargs)

    policy.model.forward = recording_forward
    before = torch.backends.cuda.cudnn_sdp_enabled()
    chats = [[{"role": "user", "content": "Write a Triton kernel for softmax."}], [{"role": "user", "content": "x"}]]
    (row, _) = policy.generate(chats, SamplingParams(n=2, temperature=0.8, max_new_tokens=12, seed=0))
    assert [len(c.token_ids) for c in row] == [12, 12]
    # one batch of 4 rows, one forward per new token: the prompt once, then one token a step (the cache holds
    # the rest; without it every step would re-run the whole sequence)
    assert len(seen) == 12 and seen[0][0] > 1 and all(length == 1 for length, _ in seen[1:])
    assert {cudnn for _, cudnn in seen} == {False}
    assert torch.backends.cuda.cudnn_sdp_enabled() == before  # restored after generate


def test_run_grpo_generates_without_cudnn_attention_and_trains_with_the_defaults(tmp_path, monkeypatch):
    import trl

    from kzcore.train import coder

    seen = {}

    class FakeGRPOTrainer:
        """What run_grpo touches of TRL's GRPOTrainer; train() generates once, as TRL does, then 'updates'."""

        def __init__(self, model, reward_funcs, args, train_dataset, callbacks=()):
            self.args = args
            self.model = SimpleNamespace(generate=self._generate)
            self.state = SimpleNamespace(global_step=1, log_history=[], num_input_tokens_seen=0)
            self.processing_class = SimpleNamespace(save_pretrained=lambda path: None)

        def _generate(self, *args, **kwargs):
            seen["generate"] = torch.backends.cuda.cudnn_sdp_enabled()
            return "ids"

        def add_callback(self, callback):
            """run_grpo adds its checkpoint callback here; the fake never calls it."""

        def is_world_process_zero(self):
            return True

        def train(self, resume_from_checkpoint=None):
            assert self.model.generate(input_ids=None) == "ids"
            seen["update"] = torch.backends.cuda.cudnn_sdp_enabled()

        def save_model(self, path):
            """run_grpo saves the phase's model here; the fake has no weights to write."""

    monkeypatch.setattr(trl, "GRPOTrainer", FakeGRPOTrainer)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    metrics = coder.run_grpo("model", [], [], coder.GRPOSettings(use_cpu=True), tmp_path)
    assert metrics["steps"] == 1 and 0 <= metrics["generation_seconds"] <= metrics["train_seconds"]
    assert seen == {"generate": False, "update": before}
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    # a trainer that never calls the model's generate (TRL with vLLM): no generation time is claimed
    monkeypatch.setattr(FakeGRPOTrainer, "train", lambda self, resume_from_checkpoint=None: None)
    assert coder.run_grpo("model", [], [], coder.GRPOSettings(use_cpu=True), tmp_path)["generation_seconds"] is None
