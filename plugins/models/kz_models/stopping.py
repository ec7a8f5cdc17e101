"""Stop strings, applied the same way by every backend: the completion's text ends just before the first
occurrence of any stop string (the stop string itself is not part of the text, as in vLLM and OpenAI)."""

from __future__ import annotations

from collections.abc import Sequence


def first_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """(index, stop string) of the earliest stop string in ``text``; the longest wins a tie. None if none."""
    best: tuple[int, str] | None = None
    for stop in stops:
        if not stop:
            continue
        at = text.find(stop)
        if at < 0:
            continue
        if best is None or at < best[0] or (at == best[0] and len(stop) > len(best[1])):
            best = (at, stop)
    return best


def truncate_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """(text up to the first stop string, whether one was found)."""
    hit = first_stop(text, stops)
    return (text, False) if hit is None else (text[: hit[0]], True)
