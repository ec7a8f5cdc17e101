"""The static-cache decoder (kz_models.graphdecode): the same tokens as transformers' generate on tiny random
Llama / Qwen2 / Qwen3 models with left padding and EOS, sampling as transformers filters, its self-check failing
when the decoder is wrong, and the routing that sends what it does not implement to ``generate``. On a CPU the
decoding step runs eagerly; the CUDA-graph replay is covered by the GPU tests at the end."""

from __future__ import annotations

import pytest

from kzcore.policy import PolicyError, SamplingParams

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import interpreted_attention  # noqa: E402

from kz_models import graphdecode  # noqa: E402
from kz_models.graphdecode import StaticDecoder, fast_generate, sample, unsupported, verify  # noqa: E402

EOS, PAD = 3, 0
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny(kind: str = "llama", **extra):
    """A tiny random causal LM of ``kind`` (fp32, eval mode, seeded)."""
    configs = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }
    config_cls, model_cls = configs[kind]
    torch.manual_seed(0)
    settings = dict(
        vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, eos_token_id=EOS, pad_token_id=PAD, bos_token_id=1,
        initializer_range=0.3, head_dim=16,
    )  # fmt: skip
    settings.update(extra)
    return model_cls(config_cls(**settings)).eval()


def recording(model, calls: list):
    """transformers' generate on ``model``, noting each call's arguments in ``calls``."""

    def original(**kwargs):
        calls.append(kwargs)
        return model.generate(**kwargs)

    return original


def left_padded(rows: int = 3, width: int = 11, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 96, (rows, width), generator=gen)
    mask = torch.ones_like(ids)
    for r in range(1, rows):
        mask[r, : 3 * r] = 0
    return ids.masked_fill(mask == 0, PAD), mask


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_greedy_tokens_are_transformers_generate_tokens(kind):
    model = tiny(kind)
    ids, mask = left_padded()
    expected = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=24, do_sample=False, pad_token_id=PAD)
    got, logprobs = StaticDecoder(model).generate(ids, mask, 24, eos_ids=[EOS], pad_id=PAD, logprobs=True)
    assert torch.equal(got, expected[:, ids.shape[1] :])
    # the log-probabilities are the model's own, teacher-forced
    full = torch.cat([ids, got], dim=1)
    full_mask = torch.ones_like(full)
    full_mask[:, : ids.shape[1]] = mask
    positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=full, attention_mask=full_mask, position_ids=positions).logits
    ref = torch.log_softmax(logits[:, ids.shape[1] - 1 : -1].float(), -1).gather(2, got[..., None])[..., 0]
    for row in range(got.shape[0]):  # up to and including a row's EOS (after it the row is padding)
        tokens = got[row].tolist()
        end = tokens.index(EOS) + 1 if EOS in tokens else len(tokens)
        assert torch.allclose(logprobs[row, :end], ref[row, :end], atol=1e-4)


def test_eos_ends_a_row_and_pads_after_it_as_generate_does():
    model = tiny()
    ids, mask = left_padded()
    free, _ = StaticDecoder(model).generate(ids, mask, 16, pad_id=PAD)
    stop = int(free[0, 4])  # a token row 0 emits at step 4 becomes its EOS
    expected = model.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=16, do_sample=False, pad_token_id=PAD, eos_token_id=stop
    )[:, ids.shape[1] :]
    got, _ = StaticDecoder(model).generate(ids, mask, 16, eos_ids=[stop], pad_id=PAD, check_every=1)
    width = min(got.shape[1], expected.shape[1])
    assert torch.equal(got[:, :width], expected[:, :width])
    first = got[0].tolist().index(stop)
    assert first <= 4 and set(got[0, first + 1 :].tolist()) <= {PAD}


def test_a_finished_batch_stops_early():
    model = tiny()
    ids, mask = left_padded()
    with torch.no_grad():
        model.lm_head.weight.zero_()  # all logits equal: greedy picks token 0, made the EOS here
    got, _ = StaticDecoder(model).generate(ids, mask, 200, eos_ids=[0], pad_id=1, check_every=8)
    assert got.shape[1] == 8 and (got[:, 0] == 0).all() and (got[:, 1:] == 1).all()


def test_verify_accepts_the_decoder_and_catches_a_wrong_one(monkeypatch):
    for kind in ("llama", "qwen2", "qwen3"):
        assert verify(tiny(kind)) is None
    # a forward wrapped in bf16 autocast, as accelerate wraps it for mixed-precision training (TRL's GRPO on a
    # GPU): the decoder's float32 arithmetic differs by half-precision noise only (on an H200, 1.8e-2 of the
    # logits' scale: a float32 tolerance would send GRPO back to transformers' generate)
    mixed = tiny()
    mixed.forward = torch.autocast("cpu", dtype=torch.bfloat16)(mixed.forward)
    error, agree = graphdecode.agreement(mixed)
    assert 1e-3 < error < graphdecode.MAX_ERROR and agree >= graphdecode.MIN_ARGMAX_AGREEMENT
    assert verify(mixed) is None
    monkeypatch.setattr(graphdecode, "_rotate_half", lambda x: x)  # RoPE done wrong
    reason = verify(tiny())
    assert reason is not None and "differ from the model's forward" in reason


def test_unsupported_models_are_named():
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    assert "model type 'gpt2'" in unsupported(gpt2)
    assert "sliding attention window" in unsupported(tiny("mistral", sliding_window=8))
    assert unsupported(tiny("mistral", sliding_window=None)) is None
    with pytest.raises(ValueError, match="cannot decode this model"):
        StaticDecoder(gpt2)


def test_sampling_filters_as_transformers_orders_them():
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]])).repeat(20000, 1)
    torch.manual_seed(0)
    assert (sample(logits, 0.0, 0, 1.0) == 0).all()  # temperature 0: greedy
    assert (sample(logits, 1.0, 1, 1.0) == 0).all()  # top-k 1
    assert (sample(logits, 1.0, 0, 0.5) == 0).all()  # the smallest set reaching 0.5 is {0}
    assert set(sample(logits, 1.0, 0, 0.8).tolist()) == {0, 1}  # {0, 1} reaches 0.9 >= 0.8
    assert set(sample(logits, 1.0, 2, 1.0).tolist()) == {0, 1}
    counts = torch.bincount(sample(logits, 1.0, 0, 1.0), minlength=3).float() / 20000
    assert torch.allclose(counts, torch.tensor([0.6, 0.3, 0.1]), atol=0.015)
    hot = torch.bincount(sample(logits, 2.0, 0, 1.0), minlength=3).float() / 20000
    flat = torch.softmax(logits[0] / 2.0, -1)  # temperature applies before the filters
    assert torch.allclose(hot, flat, atol=0.015)


def test_fast_generate_decodes_what_it_implements_and_hands_on_the_rest(capsys):
    model = tiny()
    ids, mask = left_padded()
    calls = []
    generate = fast_generate(model, recording(model, calls))
    config = transformers.GenerationConfig(max_new_tokens=12, do_sample=False, pad_token_id=PAD, eos_token_id=[EOS])
    out = generate(input_ids=ids, attention_mask=mask, generation_config=config, disable_compile=True)
    assert calls == []
    expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert torch.equal(out[:, : expected.shape[1]], expected)
    penalised = transformers.GenerationConfig(
        max_new_tokens=4, do_sample=False, repetition_penalty=1.3, pad_token_id=PAD
    )
    generate(input_ids=ids, attention_mask=mask, generation_config=penalised)
    assert len(calls) == 1 and calls[0]["generation_config"] is penalised
    assert capsys.readouterr().err == ""


def test_fast_generate_falls_back_for_good_and_says_so_when_the_decoder_fails(monkeypatch, capsys):
    model = tiny()
    ids, mask = left_padded()
    calls = []

    def broken(self, *args, **kwargs):
        raise RuntimeError("capture failed\nsecond line")

    generate = fast_generate(model, recording(model, calls))
    config = transformers.GenerationConfig(max_new_tokens=5, do_sample=False, pad_token_id=PAD)
    monkeypatch.setattr(StaticDecoder, "generate", broken)
    generate(input_ids=ids, attention_mask=mask, generation_config=config)
    generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert len(calls) == 2
    err = capsys.readouterr().err
    assert err.count("kz: decoding through transformers' generate") == 1 and "RuntimeError: capture failed" in err
    assert "second line" not in err


def test_the_hf_policy_decodes_the_same_either_way(tmp_path):
    from kz_models.hf import HFPolicy
    from tests.tinymodel import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path / "tiny", context=256)
    chats = [[{"role": "user", "content": "Write a Triton kernel for softmax."}], [{"role": "user", "content": "x"}]]
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=20)
    runs = {}
    for decoder in ("static", "transformers"):
        policy = HFPolicy.from_path(path, device="cpu", batch_size=4, decoder=decoder)
        runs[decoder] = policy.generate(chats, params)
        assert policy._uses_static_decoder() is (decoder == "static")
    for got, expected in zip(runs["static"], runs["transformers"]):
        for a, b in zip(got, expected):
            assert (a.token_ids, a.text, a.finish_reason) == (b.token_ids, b.text, b.finish_reason)
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    # sampling through the static decoder: seeded, so the same twice
    sampled = SamplingParams(n=2, temperature=0.9, top_p=0.9, max_new_tokens=10, seed=3)
    policy = HFPolicy.from_path(path, device="cpu", batch_size=4, decoder="static")
    assert [[c.token_ids for c in r] for r in policy.generate(chats, sampled)] == [
        [c.token_ids for c in r] for r in policy.generate(chats, sampled)
    ]


def test_the_decoder_option_is_checked(tmp_path):
    from kz_models.hf import HFPolicy
    from tests.tinymodel import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path / "tiny", context=256)
    with pytest.raises(PolicyError, match="decoder must be one of auto, static, transformers"):
        HFPolicy.from_path(path, device="cpu", decoder="fast")
    policy = HFPolicy.from_path(path, device="cpu", decoder="static")
    policy.model.config.model_type = "gpt2"  # a model the decoder does not cover: static is refused
    with pytest.raises(PolicyError, match="decoder=static: model type 'gpt2'"):
        policy.generate([[{"role": "user", "content": "x"}]], SamplingParams(max_new_tokens=2))
    auto = HFPolicy.from_path(path, device="cpu")
    assert auto._uses_static_decoder() is False  # auto decodes through transformers on a CPU


def test_kz_models_offers_the_decoder_only_on_a_gpu(monkeypatch):
    import kz_models

    model = tiny()
    assert kz_models.kz_fast_generate(model=model, generate=model.generate) is None  # a CPU model


# -- the Triton attention (kz_models.decode_attention), in Triton's interpreter on a CPU ----------------------


@pytest.fixture(scope="module")
def interpreted_checks():
    """interpreted_attention.py's checks, run once in a fresh process with ``TRITON_INTERPRET=1``: Triton reads
    it when it is imported (its own library functions are jitted then), and this process imported it without."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton")
    here = Path(__file__).resolve().parent
    root = here.parents[2]
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([str(root), str(here)])}
    proc = subprocess.run([sys.executable, str(here / "interpreted_attention.py")], env=env, cwd=root,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", interpreted_attention.CHECKS)
def test_the_triton_attention(interpreted_checks, name):
    """Each check's docstring in interpreted_attention.py says what it shows."""
    assert interpreted_checks[name] == "ok", interpreted_checks[name]


def test_the_attention_option_is_checked(tmp_path):
    from kz_models.hf import HFPolicy
    from tests.tinymodel import build_tiny_checkpoint

    with pytest.raises(ValueError, match="attention must be one of matmul, triton"):
        StaticDecoder(tiny(), attention="flash")
    with pytest.raises(ValueError, match="attention=triton: head_dim 12 is not a power of two"):
        StaticDecoder(tiny(head_dim=12), attention="triton")
    path = build_tiny_checkpoint(tmp_path / "tiny", context=256)
    with pytest.raises(PolicyError, match="attention must be one of matmul, triton"):
        HFPolicy.from_path(path, device="cpu", attention="flash")


# -- GPU: the CUDA-graph replay ------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_graph_replay_matches_the_eager_step_and_the_model(dtype):
    model = tiny().to("cuda", getattr(torch, dtype))
    assert verify(model) is None
    ids, mask = left_padded()
    ids, mask = ids.cuda(), mask.cuda()
    # EOS as transformers' generate stops on it (the model's generation config); without it the decoder rightly
    # goes on past a row's EOS and the comparison would fail on the test, not the decoder
    eager, _ = StaticDecoder(model).generate(ids, mask, 32, eos_ids=[EOS], pad_id=PAD, graph=False)
    replayed, _ = StaticDecoder(model).generate(ids, mask, 32, eos_ids=[EOS], pad_id=PAD, graph=True)
    assert torch.equal(eager, replayed)
    if dtype == "float32":
        expected = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=32, do_sample=False, pad_token_id=PAD
        )
        assert torch.equal(replayed, expected[:, ids.shape[1] :])


@pytest.mark.gpu
def test_the_graph_follows_weights_that_change_between_calls():
    import kz_models

    model = tiny().cuda()
    generate = kz_models.kz_fast_generate(model=model, generate=model.generate)
    assert generate is not None
    ids, mask = (t.cuda() for t in left_padded())
    config = transformers.GenerationConfig(max_new_tokens=8, do_sample=False, pad_token_id=PAD)
    first = generate(input_ids=ids, attention_mask=mask, generation_config=config)
    with torch.no_grad():  # an optimizer step, in place
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    second = generate(input_ids=ids, attention_mask=mask, generation_config=config)
    expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert torch.equal(second[:, : expected.shape[1]], expected) and not torch.equal(first, second)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_triton_attention_replays_in_a_graph(dtype):
    """The kernel inside the captured step: the same tokens as the matmul attention (bf16: up to a near-tie)."""
    model = tiny().to("cuda", getattr(torch, dtype))
    ids, mask = (t.cuda() for t in left_padded())
    matmul, _ = StaticDecoder(model).generate(ids, mask, 32, eos_ids=[EOS], pad_id=PAD, graph=True)
    decoder = StaticDecoder(model, attention="triton")
    kernel, _ = decoder.generate(ids, mask, 32, eos_ids=[EOS], pad_id=PAD, graph=True)
    assert decoder._kernel
    if dtype == "float32":
        assert torch.equal(kernel, matmul)
    else:
        assert (kernel[:, :8] == matmul[:, :8]).float().mean() > 0.9
