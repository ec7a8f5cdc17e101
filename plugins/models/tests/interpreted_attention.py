"""Checks of kz_models.decode_attention's Triton kernel in Triton's interpreter (a CPU), run in a process of their
own by test_graphdecode.py's ``interpreted_checks``: ``TRITON_INTERPRET=1`` must be set before Triton is imported.
Prints one JSON line, check name -> "ok" or the failure."""

from __future__ import annotations

import json
import os
import traceback

CHECKS = [
    "attention_is_the_masked_attention",
    "decodes_what_the_matmuls_decode",
    "a_mask_that_is_not_left_padding_attends_through_the_matmuls",
    "the_hf_policy_decodes_the_same_either_way",
]
CASES = [(3, 4, 2, 16, 40, 33), (2, 9, 3, 64, 600, 517), (2, 4, 4, 16, 300, 300), (1, 8, 1, 32, 70, 1)]


def masked_attention(q, keys, values, first, end, scale):
    """Softmax attention of each row's query heads over its cache slots [first, end), in float64."""
    import torch

    heads, n_kv, length = q.shape[1], keys.shape[1], keys.shape[2]
    slots = torch.arange(length)
    valid = (slots[None] >= first[:, None]) & (slots[None] < end)
    k = keys.double().repeat_interleave(heads // n_kv, dim=1)
    v = values.double().repeat_interleave(heads // n_kv, dim=1)
    scores = (q.double() @ k.transpose(-1, -2)) * scale
    return torch.softmax(scores.masked_fill(~valid[:, None, None, :], float("-inf")), dim=-1) @ v


def attention_is_the_masked_attention():
    """Chunks wholly past the last slot or before a row's first, chunks cut by either, one query head or nine per
    KV head, a single valid slot: the kernel's merged result is softmax attention over the valid slots."""
    import torch

    from kz_models.decode_attention import attend

    for batch, heads, n_kv, dim, length, end in CASES:
        gen = torch.Generator().manual_seed(length)
        q = torch.randn((batch, heads, 1, dim), generator=gen)
        keys, values = (torch.randn((batch, n_kv, length, dim), generator=gen) for _ in range(2))
        first = torch.tensor([0, 5, 17][:batch]).clamp(max=end - 1)
        got = attend(q, keys, values, first, torch.tensor([end]), 0.25)
        assert got.shape == (batch, heads, 1, dim) and got.dtype == q.dtype, (got.shape, got.dtype)
        error = float((got.double() - masked_attention(q, keys, values, first, end, 0.25)).abs().max())
        assert error < 1e-5, (batch, heads, n_kv, dim, length, end, error)


def decodes_what_the_matmuls_decode():
    """Greedy decoding of tiny Llama and Qwen3 models (left padding, EOS) through the kernel gives transformers'
    tokens, and the matmul decoder's log-probabilities."""
    import torch
    from test_graphdecode import EOS, PAD, left_padded, tiny

    from kz_models.graphdecode import StaticDecoder

    for kind in ("llama", "qwen3"):
        model = tiny(kind)
        ids, mask = left_padded()
        expected = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=24, do_sample=False,
                                  pad_token_id=PAD)[:, ids.shape[1]:]  # fmt: skip
        decoder = StaticDecoder(model, attention="triton")
        got, logprobs = decoder.generate(ids, mask, 24, eos_ids=[EOS], pad_id=PAD, logprobs=True)
        assert decoder._kernel, kind
        assert torch.equal(got, expected), (kind, got, expected)
        _, reference = StaticDecoder(model).generate(ids, mask, 24, eos_ids=[EOS], pad_id=PAD, logprobs=True)
        assert torch.allclose(logprobs, reference, atol=1e-4), kind


def a_mask_that_is_not_left_padding_attends_through_the_matmuls():
    """The kernel reads a row's slots from its first real token on; a mask with a hole is attended the masked way
    instead, with the matmul decoder's result."""
    import torch
    from test_graphdecode import PAD, left_padded, tiny

    from kz_models.graphdecode import StaticDecoder

    model = tiny()
    ids, mask = left_padded()
    mask[0, 4] = 0
    decoder = StaticDecoder(model, attention="triton")
    got, _ = decoder.generate(ids, mask, 12, pad_id=PAD)
    assert not decoder._kernel
    assert torch.equal(got, StaticDecoder(model).generate(ids, mask, 12, pad_id=PAD)[0])


def the_hf_policy_decodes_the_same_either_way():
    """``hf:PATH?decoder=static&attention=triton`` completes prompts as ``attention=matmul`` does."""
    import tempfile
    from pathlib import Path

    from kz_models.hf import HFPolicy
    from kzcore.policy import SamplingParams
    from tests.tinymodel import build_tiny_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_checkpoint(Path(tmp) / "tiny", context=256, hidden=64)  # head_dim 16
        chats = [
            [{"role": "user", "content": "Write a Triton kernel for softmax."}],
            [{"role": "user", "content": "x"}],
        ]
        params = SamplingParams(n=2, temperature=0.0, max_new_tokens=12)
        runs = []
        for attention in ("matmul", "triton"):
            policy = HFPolicy.from_path(path, device="cpu", batch_size=4, decoder="static", attention=attention)
            runs.append([[(c.token_ids, c.text) for c in r] for r in policy.generate(chats, params)])
        assert runs[0] == runs[1], runs


def main() -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
    import torch

    torch.set_num_threads(1)
    results = {}
    for name in CHECKS:
        try:
            globals()[name]()
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - every check reports, the test names the one that failed
            results[name] = traceback.format_exc()[-2000:]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
