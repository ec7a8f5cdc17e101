"""Plugin for the openai/serve tests: registers ``echo`` (a deterministic policy for the server side) and
``openai`` (the real backend). Served with ``python -m kzcore.serve --policy echo --plugins tests.fakes_openai``.

The echo policy answers the last user message reversed, with `` #S`` (the sample index) appended; token ids are
the characters' code points and token S's logprob is ``-((S % 5) + 1) / 8``. Prompt flags:
  ``!slow:SECONDS rest``  sleep first (concurrency tests)
  ``!fail:KEY:K rest``    raise RuntimeError (a 500) the first K times KEY is seen, then answer normally
  ``!crash``              always raise RuntimeError
  ``!params``             answer the SamplingParams it received as JSON (no token ids)
A prompt longer than the limit (``echo:LIMIT``, default 200 characters) raises ``PolicyError("context overflow
...")``.
"""

from __future__ import annotations

import json
import threading
import time

import attrs

from kzcore import hookimpl
from kzcore.policy import Chat, Completion, PolicyError, SamplingParams

DEFAULT_LIMIT = 200


def echo_logprob(position: int) -> float:
    return -((position % 5) + 1) / 8


class EchoPolicy:
    def __init__(self, limit: int = DEFAULT_LIMIT):
        self.name = "echo"
        self.limit = limit
        self.failures: dict[str, int] = {}
        self._lock = threading.Lock()
        self._generating = False

    @classmethod
    def from_spec(cls, spec: str) -> EchoPolicy:
        return cls(int(spec) if spec else DEFAULT_LIMIT)

    def count_prompt_tokens(self, chat: Chat) -> int:
        return sum(len(m["content"]) for m in chat)

    def generate(self, prompts: list[Chat], params: SamplingParams) -> list[list[Completion]]:
        with self._lock:  # policies are not thread-safe: whoever serves one must not call it concurrently
            if self._generating:
                raise RuntimeError("echo: generate called while another call is running")
            self._generating = True
        try:
            return self._generate(prompts, params)
        finally:
            self._generating = False

    def _generate(self, prompts: list[Chat], params: SamplingParams) -> list[list[Completion]]:
        results = []
        for prompt_index, chat in enumerate(prompts):
            size = self.count_prompt_tokens(chat)
            if size > self.limit:
                raise PolicyError(f"context overflow: the prompt has {size} tokens, the limit is {self.limit}")
            message = self._act_on_flags([m["content"] for m in chat if m["role"] == "user"][-1])
            if message == "!params":
                text = json.dumps(attrs.asdict(params))
                results.append([Completion(text, prompt_index, s) for s in range(params.n)])
            else:
                results.append([self._sample(prompt_index, s, message, params) for s in range(params.n)])
        return results

    def _act_on_flags(self, message: str) -> str:
        if message == "!crash":
            raise RuntimeError("echo crashed on purpose")
        if message.startswith("!slow:"):
            flag, _, message = message.partition(" ")
            time.sleep(float(flag.removeprefix("!slow:")))
        elif message.startswith("!fail:"):
            flag, _, message = message.partition(" ")
            _, key, times = flag.split(":")
            with self._lock:
                seen = self.failures[key] = self.failures.get(key, 0) + 1
            if seen <= int(times):
                raise RuntimeError(f"echo failure {seen} of {times} for {key}")
        return message

    def _sample(self, prompt_index: int, sample_index: int, message: str, params: SamplingParams) -> Completion:
        text, finish = f"{message[::-1]} #{sample_index}", "stop"
        cuts = [text.index(s) for s in params.stop if s in text]
        if cuts:
            text = text[: min(cuts)]
        if len(text) > params.max_new_tokens:
            text, finish = text[: params.max_new_tokens], "length"
        ids = tuple(ord(c) for c in text)
        logprobs = tuple(echo_logprob(k) for k in range(len(ids)))
        return Completion(text, prompt_index, sample_index, ids, logprobs, finish)

    def close(self) -> None:
        pass


def openai_policy(spec: str):
    from kz_models.openai_backend import load_openai_policy

    return load_openai_policy(spec)


@hookimpl
def kz_register_policies(register):
    register("echo", EchoPolicy.from_spec)
    register("openai", openai_policy)
