"""The policy protocol: chat prompts + sampling parameters → completions. Backends (hf, vllm, openai,
replay, ...) are plugins registered through ``kz_register_policies``; the trainer, the Proposer,
distillation and ``kz eval --policy`` only ever see this interface.

A policy is named on the command line as ``NAME[:ARG]`` (``hf:/models/qwen``, ``openai:http://host/v1``,
``replay:completions.jsonl``); the registered factory receives ``ARG`` ("" when absent).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import attrs

from kzcore.errors import KzError

Chat = list[dict[str, str]]  # [{"role": "system"|"user"|"assistant", "content": str}, ...]


class PolicyError(KzError):
    """A backend failed in a way the user can fix (missing model path, server down, context overflow)."""


@attrs.frozen
class SamplingParams:
    n: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    temperature: float = attrs.field(default=0.7, validator=attrs.validators.ge(0.0))
    top_p: float = attrs.field(default=0.95, validator=[attrs.validators.gt(0.0), attrs.validators.le(1.0)])
    max_new_tokens: int = attrs.field(default=1024, validator=attrs.validators.ge(1))
    seed: int | None = None
    stop: tuple[str, ...] = attrs.field(default=(), converter=tuple)


@attrs.frozen
class Completion:
    """One sampled completion of prompt ``prompt_index``. ``token_ids`` / ``logprobs`` (per generated
    token) are filled where the backend can; ``finish_reason`` is "stop", "length" or "error"."""

    text: str
    prompt_index: int = 0
    sample_index: int = 0
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    finish_reason: str = "stop"


@runtime_checkable
class Policy(Protocol):
    name: str

    def generate(self, prompts: list[Chat], params: SamplingParams) -> list[list[Completion]]:
        """``params.n`` completions for each prompt, in prompt order."""
        ...

    def close(self) -> None: ...


def parse_policy_spec(spec: str) -> tuple[str, str]:
    """``"hf:/path"`` → ("hf", "/path"); ``"smollm2"`` → ("smollm2", "")."""
    name, _, arg = spec.partition(":")
    if not name:
        raise PolicyError(f"policy {spec!r}: expected NAME[:ARG], e.g. hf:/models/x or openai:http://127.0.0.1:8000/v1")
    return name, arg


def load_policy(spec: str, pm=None) -> Policy:
    """Build the policy named by ``spec`` through the registered factories."""
    from kzcore.plugins import policies

    name, arg = parse_policy_spec(spec)
    factory = policies(pm).get(name)
    return factory(arg)
