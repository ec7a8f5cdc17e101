"""The precision a model is held and computed in, for every path that loads one to train (SFT, GRPO for the
Coder and the Proposer) or to sample (the ``hf`` policy, the embedded model's conversion): on a CPU fp32 weights
and fp32 compute, on a GPU bf16 where asked.

Why one place: transformers 5 loads a checkpoint in the dtype its config names when ``from_pretrained`` gets none
(the embedded model's converted checkpoint says bfloat16), and TRL's configs turn bf16 autocast on unless told
otherwise; on a CPU without fast bf16 matmuls one 512-token forward and backward of SmolLM2-135M took 138.5 s in
bf16 against 10.4 s in fp32 (docs/training.md, "Precision")."""

from __future__ import annotations

from typing import Any

DTYPES = ("auto", "float32", "bfloat16", "float16")


def on_cpu(use_cpu: bool) -> bool:
    """Whether training runs on a CPU: asked for, or no CUDA device to run on."""
    if use_cpu:
        return True
    import torch

    return not torch.cuda.is_available()


def model_dtype(device: str, requested: str = "auto") -> Any:
    """The torch dtype to load a model in on ``device`` ("cpu", "cuda", "cuda:N"): ``requested`` when named,
    else (``"auto"``) bf16 on a GPU, where it halves memory, and fp32 on a CPU, where fp32 matmuls are the fast
    path."""
    import torch

    if requested not in DTYPES:
        raise ValueError(f"dtype {requested!r} must be one of {', '.join(DTYPES)}")
    if requested == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, requested)


def trainer_precision(use_cpu: bool) -> dict[str, Any]:
    """Keyword arguments for a TRL ``SFTConfig`` / ``GRPOConfig``: on a CPU, fp32 weights (the model is loaded
    with this dtype whatever its config says) and no bf16 autocast (TRL's configs default ``bf16`` to on). On a
    GPU nothing is changed: TRL's fp32 weights with bf16 autocast."""
    if not on_cpu(use_cpu):
        return {}
    return {"bf16": False, "fp16": False, "model_init_kwargs": {"dtype": "float32"}}
