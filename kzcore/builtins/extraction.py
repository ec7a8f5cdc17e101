"""Default source extraction: model completions → candidate module source."""

from __future__ import annotations

import re

from kzcore import hookimpl

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_FENCE = re.compile(r"^```[ \t]*([\w+-]*)[ \t]*\n(.*?)(?:^```[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)
MARKER = "class ModelNew"


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(fence tag, body) for every fenced block; an unterminated last block runs to the end."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def extract_source(completion: str) -> str:
    """The last fenced block that defines ModelNew; else the whole text if it does; else ""."""
    text = _THINK.sub("", completion)
    blocks = [body for _tag, body in code_blocks(text) if MARKER in body]
    if blocks:
        return blocks[-1].strip("\n") + "\n"
    if MARKER in text and "```" not in text:
        return text.strip("\n") + "\n"
    return ""


@hookimpl(trylast=True)
def kz_extract_source(language, completion):
    return extract_source(completion)
