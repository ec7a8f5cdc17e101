"""replay: completions read back from a JSONL file, so outputs of other systems (or of an earlier run) go
through the same pipeline as a live model's.

Spec: ``replay:FILE.jsonl``. One row per completion::

    {"problem": "19_Matmul", "sample": 0, "text": "..."}      # matched by problem name
    {"prompt": "<the last user message, verbatim>", "text": "..."}
    {"prompt_sha256": "<hex sha256 of that message>", "text": "..."}

``text`` may be called ``completion``; ``sample`` defaults to the row's rank among rows of the same key;
``finish_reason`` (default "stop") is copied. A chat prompt is matched, in this order, by the problem name in a
``<!-- kz:problem=NAME -->`` marker in any of its messages, by its last user message, then by that message's
sha256 (``prompt_key`` below computes all three). Stop strings cut the text as for any backend.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

from kz_models.stopping import truncate_at_stop
from kzcore import Chat, Completion, PolicyError, SamplingParams

PROBLEM_MARKER = re.compile(r"<!--\s*kz:problem=([^\s>]+)\s*-->")
KEY_FIELDS = ("problem", "prompt", "prompt_sha256")


def load_replay_policy(arg: str) -> ReplayPolicy:
    if not arg:
        raise PolicyError("replay needs a file: replay:completions.jsonl")
    return ReplayPolicy(Path(arg).expanduser())


def problem_marker(name: str) -> str:
    """The marker a prompt builder puts in a prompt so that replay can match it by problem name."""
    return f"<!-- kz:problem={name} -->"


def last_user_message(chat: Chat) -> str:
    for message in reversed(chat):
        if message.get("role") == "user":
            return message.get("content", "")
    return ""


def prompt_key(chat: Chat) -> list[tuple[str, str]]:
    """The keys a chat can be found under, in matching order: (field, value) pairs."""
    keys = []
    for message in chat:
        found = PROBLEM_MARKER.search(message.get("content", ""))
        if found:
            keys.append(("problem", found.group(1)))
            break
    user = last_user_message(chat)
    keys.append(("prompt", user))
    keys.append(("prompt_sha256", hashlib.sha256(user.encode()).hexdigest()))
    return keys


class ReplayPolicy:
    def __init__(self, path: Path):
        if not path.is_file():
            raise PolicyError(f"replay: file {path} does not exist")
        self.path = path
        self.name = f"replay:{path}"
        self.rows: dict[tuple[str, str], dict[int, Completion]] = {}
        for line_no, row in self._read():
            self._add(line_no, row)

    def _read(self) -> Iterator[tuple[int, dict]]:
        with self.path.open(encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise PolicyError(f"replay: {self.path}:{line_no}: not JSON ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise PolicyError(f"replay: {self.path}:{line_no}: a row must be a JSON object")
                yield line_no, row

    def _add(self, line_no: int, row: dict) -> None:
        where = f"replay: {self.path}:{line_no}"
        fields = [f for f in KEY_FIELDS if f in row]
        if len(fields) != 1:
            raise PolicyError(f"{where}: a row needs exactly one of {', '.join(KEY_FIELDS)}")
        text = row.get("text", row.get("completion"))
        if not isinstance(text, str):
            raise PolicyError(f"{where}: a row needs a string 'text' (or 'completion')")
        key = (fields[0], str(row[fields[0]]))
        samples = self.rows.setdefault(key, {})
        sample = row.get("sample", len(samples))
        if not isinstance(sample, int) or sample < 0:
            raise PolicyError(f"{where}: 'sample' must be a non-negative integer")
        if sample in samples:
            raise PolicyError(f"{where}: a second completion for {key[0]}={key[1][:60]!r} sample {sample}")
        samples[sample] = Completion(text=text, finish_reason=str(row.get("finish_reason", "stop")))

    def generate(self, prompts: list[Chat], params: SamplingParams) -> list[list[Completion]]:
        results = []
        for index, chat in enumerate(prompts):
            samples = self._samples_for(chat, index)
            missing = [s for s in range(params.n) if s not in samples]
            if missing:
                raise PolicyError(
                    f"replay: {self.path} has no sample {missing[0]} for prompt {index} ({_describe(chat)}); "
                    f"{params.n} asked, {len(samples)} recorded"
                )
            results.append([self._completion(samples[s], index, s, params) for s in range(params.n)])
        return results

    def _samples_for(self, chat: Chat, index: int) -> dict[int, Completion]:
        for key in prompt_key(chat):
            if key in self.rows:
                return self.rows[key]
        raise PolicyError(f"replay: {self.path} has no completions for prompt {index} ({_describe(chat)})")

    @staticmethod
    def _completion(recorded: Completion, index: int, sample: int, params: SamplingParams) -> Completion:
        text, stopped = truncate_at_stop(recorded.text, params.stop)
        reason = "stop" if stopped else recorded.finish_reason
        return Completion(text=text, prompt_index=index, sample_index=sample, finish_reason=reason)

    def close(self) -> None:
        self.rows.clear()


def _describe(chat: Chat) -> str:
    for field, value in prompt_key(chat):
        if field == "problem":
            return f"problem {value}"
    user = " ".join(last_user_message(chat).split())
    return f"user message {user[:60]!r}" + ("..." if len(user) > 60 else "")
