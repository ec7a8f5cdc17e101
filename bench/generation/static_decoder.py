"""kz_models' static-cache decoder (CUDA graphs) against transformers' generate, side by side in one process on
the embedded SmolLM2-135M: milliseconds per decoding step at two batch sizes, greedy, every row running to
``--new`` tokens (EOS ignored by both), and how far the two greedy decodes agree (bf16: they part once a
near-tie falls the other way), for each of the decoder's attentions (``--attentions``: the masked matmuls, the
Triton split-K kernel). Greedy paths that part say nothing of which side rounds better, so each decode is also
scored against the model in float32: along the decode's own tokens, the share of steps where its token is the
float32 model's argmax (``fp32_agreement``; transformers' bf16 decode scored the same way beside it). Also the
decoder's check against the model's forward (``agreement``).

    python bench/generation/static_decoder.py --out decoder.json      # on a GPU machine; prints one JSON
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from kz_models.graphdecode import StaticDecoder, agreement, decoding_attention
from kz_models.smollm2 import ensure_checkpoint


def prompts(tokenizer, batch: int, device):
    """``batch`` chat prompts of different lengths (a Coder-like request with a problem file), left-padded."""
    from kz_suites import BUILTIN_SUITE

    files = sorted((BUILTIN_SUITE / "level1").glob("*.py"))
    rows = []
    for i in range(batch):
        text = files[i % len(files)].read_text()
        chat = [{"role": "user", "content": f"Write ModelNew with a Triton kernel for:\n```python\n{text}```"}]
        rows.append(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))
    width = max(len(r) for r in rows)
    ids = torch.full((batch, width), tokenizer.pad_token_id or 0, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, width - len(row) :] = torch.tensor(row)
        mask[r, width - len(row) :] = 1
    return ids.to(device), mask.to(device)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn):
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - t0


def fp32_agreement(reference, ids, mask, tokens, chunk: int = 8) -> float:
    """The share of ``tokens`` (batch x new, decoded after the left-padded prompts ``ids``/``mask``) that are the
    argmax of ``reference`` (the model in float32) given the same prefix: one teacher-forced forward a chunk of
    rows, positions counted from each row's first real token as generate counts them."""
    agree = 0
    for start in range(0, ids.shape[0], chunk):
        rows = slice(start, start + chunk)
        full = torch.cat([ids[rows], tokens[rows]], dim=1)
        full_mask = torch.cat([mask[rows], torch.ones_like(tokens[rows])], dim=1)
        positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            logits = reference(input_ids=full, attention_mask=full_mask, position_ids=positions).logits
        agree += int((logits[:, ids.shape[1] - 1 : -1].argmax(-1) == tokens[rows]).sum())
    return round(agree / tokens.numel(), 4)


def measure(model, ids, mask, new: int, pad: int, attention: str = "matmul", reference=None) -> dict:
    """Both decoders on one left-padded batch, greedy, ``new`` tokens a row; warmed up first."""
    decoder = StaticDecoder(model, attention=attention)
    decoder.generate(ids[:, -64:], mask[:, -64:], 8, pad_id=pad)  # warm-up (kernels, allocator)
    settings = dict(do_sample=False, pad_token_id=pad)

    def transformers_generate(ids, mask, new):
        with torch.no_grad(), decoding_attention():
            return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, **settings)

    transformers_generate(ids[:, -64:], mask[:, -64:], 8)
    (mine, _), t_static = timed(lambda: decoder.generate(ids, mask, new, pad_id=pad))
    ref, t_hf = timed(lambda: transformers_generate(ids, mask, new))
    ref = ref[:, ids.shape[1] :]
    same = (mine == ref).int()
    first_diff = [int(row.argmin()) if not bool(row.all()) else new for row in same]
    scored = {}
    if reference is not None:
        scored = {"static_fp32_agreement": fp32_agreement(reference, ids, mask, mine),
                  "transformers_fp32_agreement": fp32_agreement(reference, ids, mask, ref)}  # fmt: skip
    return {
        "attention": attention,
        "batch": int(ids.shape[0]),
        "prompt_tokens": int(ids.shape[1]),
        "transformers_ms_per_step": round(1000 * t_hf / new, 3),
        "static_ms_per_step": round(1000 * t_static / new, 3),
        "speedup": round(t_hf / t_static, 2),
        "rows_identical": sum(d == new for d in first_diff),
        "mean_first_difference": sum(first_diff) / len(first_diff),
        **scored,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="16,64")
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--attentions", default="matmul,triton", help="the static decoder's attentions to time")
    parser.add_argument("--no-fp32", action="store_true", help="skip scoring the decodes against float32")
    parser.add_argument("--out", default="")
    parser.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (a smoke run: eager steps)")
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ensure_checkpoint()
    tokenizer = AutoTokenizer.from_pretrained(path)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(args.device).eval()
    pad = tokenizer.pad_token_id or 0
    model.generation_config.eos_token_id = None  # both decoders run every row to --new tokens
    error, argmax_agree = agreement(model)
    reference = None
    if not args.no_fp32:  # the same weights in float32: the yardstick both bf16 decodes are scored against
        reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(args.device).eval()
    record = {
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "model": f"SmolLM2-135M-Instruct ({str(dtype).removeprefix('torch.')})",
        "new_tokens": args.new,
        "check": {"max_logit_error_of_scale": error, "argmax_agreement": argmax_agree},
        "runs": [],
    }
    for batch in (int(b) for b in args.batches.split(",")):
        batch_prompts = prompts(tokenizer, batch, args.device)
        for attention in args.attentions.split(","):
            record["runs"].append(measure(model, *batch_prompts, args.new, pad, attention, reference))
    text = json.dumps(record, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
