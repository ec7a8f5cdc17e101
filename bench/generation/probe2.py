"""Where a decoding step's time goes in HFPolicy.generate vs raw generate (SmolLM2 shape, random bf16)."""

import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe import OUT, ROOT, RESULTS, StepClock, build, host_speed, log, prompt_chat  # noqa

from kz_models.hf import HFPolicy
from kzcore.policy import SamplingParams


def allocs():
    s = torch.cuda.memory_stats()
    return s.get("num_device_alloc", -1), s.get("num_device_free", -1)


def run(tag, fn, clock):
    clock.reset()
    a0 = allocs()
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    a1 = allocs()
    log(tag, {**clock.summary(time.perf_counter() - t), "cudaMalloc": a1[0] - a0[0], "cudaFree": a1[1] - a0[1]})


def profile(tag, fn, rows=25):
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        fn()
        torch.cuda.synchronize()
    table = p.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=60)
    (OUT / f"prof_{tag}.txt").write_text(table)
    print(f"== profile {tag}\n{table}", flush=True)


host_speed()
path = build(Path(tempfile.mkdtemp()) / "smol")
policy = HFPolicy.from_path(path, device="cuda", batch_size=64)
policy.eos_ids = frozenset()
policy.model.generation_config.eos_token_id = None
model, tok = policy.model, policy.tokenizer
chat = prompt_chat(tok)
clock = StepClock(model)
policy.generate([chat], SamplingParams(n=2, temperature=0.7, max_new_tokens=8, seed=0))
ids = torch.tensor([policy.encode(chat)] * 16, device="cuda")


def pol(rows, new, top_p=0.95):
    return lambda: policy.generate(
        [chat], SamplingParams(n=rows, temperature=0.7, top_p=top_p, max_new_tokens=new, seed=0)
    )


def raw(new, **kw):
    def f():
        with torch.inference_mode():
            model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new,
                min_new_tokens=new,
                pad_token_id=tok.pad_token_id,
                **kw,
            )

    return f


run("policy16_512_a", pol(16, 512), clock)
run("policy16_512_b", pol(16, 512), clock)
run("policy16_512_topp1", pol(16, 512, 1.0), clock)
run("raw16_512_sample_topp0.95", raw(512, do_sample=True, temperature=0.7, top_p=0.95, top_k=0), clock)
run("raw16_512_sample_topp1", raw(512, do_sample=True, temperature=0.7, top_p=1.0, top_k=0), clock)
run("raw16_512_greedy", raw(512, do_sample=False), clock)
run("policy16_512_c", pol(16, 512), clock)
torch.cuda.empty_cache()
run("policy16_512_after_empty_cache", pol(16, 512), clock)
run("policy40_512", pol(40, 512), clock)
model.forward = clock.orig
profile("policy16_64", pol(16, 64))
profile("raw16_64_greedy", raw(64, do_sample=False))
host_speed()
