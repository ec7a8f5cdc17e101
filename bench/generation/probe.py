"""ms per decoding step of SmolLM2-135M's shape (30 layers, random bf16 weights) on the GPU, through
HFPolicy.generate (our code), raw model.generate variants, and TRL GRPOTrainer generation (our grpo_config)."""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins/models")]
OUT = Path(os.environ.get("OUT", "/tmp"))
RESULTS = {}
WHAT = sys.argv[1] if len(sys.argv) > 1 else "all"


def log(key, value):
    RESULTS[key] = value
    print(key, value, flush=True)
    (OUT / "bench.json").write_text(json.dumps(RESULTS, indent=1))


def host_speed():
    x = torch.randn(64, 64)
    t = time.perf_counter()
    for _ in range(20000):
        x.add_(1.0)
    log("host_us_per_cpu_op", round((time.perf_counter() - t) / 20000 * 1e6, 2))
    y = torch.randn(64, 64, device="cuda")
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20000):
        y.add_(1.0)
    torch.cuda.synchronize()
    log("host_us_per_cuda_launch", round((time.perf_counter() - t) / 20000 * 1e6, 2))


def build(path):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = ROOT / "build/kzdiag/smol"
    config = AutoConfig.from_pretrained(src)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(src).save_pretrained(path)
    return path


class StepClock:
    """Wraps model.forward: wall-clock instants of each forward start (no syncs added) and input lengths."""

    def __init__(self, model):
        self.model, self.orig = model, model.forward
        self.starts, self.lens = [], []
        model.forward = self

    def __call__(self, *a, **kw):
        ids = kw.get("input_ids")
        self.starts.append(time.perf_counter())
        self.lens.append(None if ids is None else ids.shape[1])
        return self.orig(*a, **kw)

    def reset(self):
        self.starts, self.lens = [], []

    def summary(self, total):
        gaps = [b - a for a, b in zip(self.starts, self.starts[1:])]
        n = len(gaps)
        q = max(1, n // 8)
        return {
            "forwards": len(self.starts),
            "input_lens_first3": self.lens[:3],
            "max_input_len_after_first": max(self.lens[1:], default=None),
            "ms_per_step_total": round(total / max(1, len(self.starts)) * 1e3, 2),
            "ms_step_early": round(sum(gaps[1 : 1 + q]) / q * 1e3, 2) if n > 2 else None,
            "ms_step_late": round(sum(gaps[-q:]) / q * 1e3, 2) if n > 2 else None,
        }


def prompt_chat(tok, n_words=300):
    text = "Write a fast Triton kernel for this PyTorch module. " + " ".join(["tensor"] * n_words)
    return [{"role": "user", "content": text}]


def bench_policy(path):
    from kz_models.hf import HFPolicy
    from kzcore.policy import SamplingParams

    policy = HFPolicy.from_path(path, device="cuda", batch_size=64)
    log("policy_dtype", str(policy.model.dtype))
    policy.eos_ids = frozenset()  # random weights: run every row to max_new_tokens
    policy.model.generation_config.eos_token_id = None
    clock = StepClock(policy.model)
    chat = prompt_chat(policy.tokenizer)
    log("prompt_tokens", len(policy.encode(chat)))
    # warm-up
    policy.generate([chat], SamplingParams(n=2, temperature=0.7, max_new_tokens=8, seed=0))
    for rows, new, stop in [(16, 64, ()), (16, 512, ()), (40, 512, ()), (16, 512, ("\n```\n",))]:
        clock.reset()
        torch.cuda.synchronize()
        t = time.perf_counter()
        policy.generate([chat], SamplingParams(n=rows, temperature=0.7, max_new_tokens=new, seed=0, stop=stop))
        torch.cuda.synchronize()
        log(f"policy_rows{rows}_new{new}_stop{len(stop)}", clock.summary(time.perf_counter() - t))
    policy.model.forward = clock.orig
    return policy


def bench_raw(policy):
    model, tok = policy.model, policy.tokenizer
    chat = prompt_chat(tok)
    ids = torch.tensor([policy.encode(chat)] * 16, device="cuda")
    mask = torch.ones_like(ids)
    clock = StepClock(model)
    variants = [
        ("greedy", {"do_sample": False}, 256),
        ("sample_t0.7", {"do_sample": True, "temperature": 0.7, "top_p": 1.0, "top_k": 0}, 256),
        ("no_cache", {"do_sample": False, "use_cache": False}, 128),
        ("static_nocompile", {"do_sample": False, "cache_implementation": "static", "disable_compile": True}, 256),
    ]
    if WHAT in ("all", "compile"):
        variants.append(("static_compile", {"do_sample": False, "cache_implementation": "static"}, 256))
        variants.append(("static_compile_again", {"do_sample": False, "cache_implementation": "static"}, 256))
    for name, kw, new in variants:
        clock.reset()
        torch.cuda.synchronize()
        t = time.perf_counter()
        try:
            with torch.inference_mode():
                model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    max_new_tokens=new,
                    min_new_tokens=new,
                    pad_token_id=tok.pad_token_id,
                    **kw,
                )
            torch.cuda.synchronize()
            log(f"raw_{name}_new{new}", clock.summary(time.perf_counter() - t))
        except Exception as exc:
            log(f"raw_{name}", f"failed: {type(exc).__name__}: {str(exc)[:300]}")
    model.forward = clock.orig


def bench_trl(path, gc, new=256):
    from datasets import Dataset
    from trl import GRPOTrainer

    from kzcore.train.coder import GRPOSettings, grpo_config

    settings = GRPOSettings(
        max_steps=1,
        num_generations=8,
        batch_size=16,
        max_completion_length=new,
        temperature=0.8,
        learning_rate=1e-5,
        gradient_checkpointing=gc,
    )
    chat = prompt_chat(None)
    ds = Dataset.from_list([{"prompt": chat}] * 4)

    def reward(prompts, completions, **kw):
        return [0.0] * len(completions)

    trainer = GRPOTrainer(
        model=str(path), reward_funcs=[reward], args=grpo_config(settings, Path(tempfile.mkdtemp())), train_dataset=ds
    )
    m = trainer.model
    trainer.eos_token_ids = [-1]
    trainer.generation_config.eos_token_id = None
    trainer.generation_config.min_new_tokens = new
    log(
        f"trl_gc{int(gc)}_model",
        {
            "dtype": str(m.dtype),
            "bf16_autocast": trainer.args.bf16,
            "gen": {k: str(v) for k, v in trainer.generation_kwargs.items()},
        },
    )
    clock = StepClock(m)
    orig_gen = m.generate
    gen_s = []

    def gen(*a, **kw):
        clock.reset()
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = orig_gen(*a, **kw)
        torch.cuda.synchronize()
        gen_s.append(time.perf_counter() - t)
        log(
            f"trl_gc{int(gc)}_generate",
            {**clock.summary(gen_s[-1]), "training_mode": m.training, "grad_ckpt_during": m.is_gradient_checkpointing},
        )
        return out

    m.generate = gen
    t = time.perf_counter()
    trainer.train()
    log(f"trl_gc{int(gc)}_step_s", round(time.perf_counter() - t, 2))


if __name__ == "__main__":
    log("device", torch.cuda.get_device_name())
    import transformers

    log("versions", {"torch": torch.__version__, "transformers": transformers.__version__})
    host_speed()
    path = build(Path(tempfile.mkdtemp()) / "smol")
    if WHAT in ("all", "policy", "compile"):
        policy = bench_policy(path)
        bench_raw(policy)
        policy.close()
    if WHAT in ("all", "trl"):
        for gc in (False, True):
            try:
                bench_trl(path, gc)
            except Exception as exc:
                import traceback

                traceback.print_exc()
                log(f"trl_gc{int(gc)}", f"failed: {type(exc).__name__}: {str(exc)[:300]}")
