"""Source extraction: model completions → candidate module source (`Language.extract_source`'s default; the
hook's default asks the language, `builtins.languages`)."""

from __future__ import annotations

import re

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_FENCE = re.compile(r"^```[ \t]*([\w+-]*)[ \t]*\n(.*?)(?:^```[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)
MARKER = "class ModelNew"


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(fence tag, body) for every fenced block; an unterminated last block runs to the end."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def extract_source(completion: str, fence_tags: tuple[str, ...] = ()) -> str:
    """The last fenced block that defines ModelNew; else the whole text if it does; else "". With
    ``fence_tags`` (a language's), a block tagged with one of them or untagged is preferred over one with
    another tag (a ```text block quoting the class after the ```python answer)."""
    text = _THINK.sub("", completion)
    blocks = [(tag, body) for tag, body in code_blocks(text) if MARKER in body]
    own = [block for block in blocks if not block[0] or block[0] in fence_tags] if fence_tags else []
    if blocks:
        return (own or blocks)[-1][1].strip("\n") + "\n"
    if MARKER in text and "```" not in text:
        return text.strip("\n") + "\n"
    return ""
