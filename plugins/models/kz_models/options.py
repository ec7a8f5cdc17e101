"""Backend options written after a policy spec's argument: ``hf:/models/x?device=cuda&batch_size=16``."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qsl

from kzcore import PolicyError


def split_options(backend: str, arg: str, defaults: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """``"PATH?k=v&k2=v2"`` → (PATH, defaults updated with k, k2). Keys outside ``defaults`` are refused,
    naming the known ones, so a typo never silently falls back to a default."""
    target, sep, query = arg.partition("?")
    options = dict(defaults)
    if sep:
        for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
            if key not in defaults:
                known = ", ".join(sorted(defaults)) or "none"
                raise PolicyError(f"{backend}: unknown option {key!r} in {arg!r}; known options: {known}")
            options[key] = value
    return target, options


def int_option(backend: str, options: Mapping[str, str], key: str, minimum: int = 1) -> int:
    value = options[key]
    try:
        number = int(value)
    except ValueError:
        raise PolicyError(f"{backend}: option {key}={value!r} is not an integer") from None
    if number < minimum:
        raise PolicyError(f"{backend}: option {key}={number} must be >= {minimum}")
    return number


def choice_option(backend: str, options: Mapping[str, str], key: str, choices: tuple[str, ...]) -> str:
    value = options[key]
    if value not in choices:
        raise PolicyError(f"{backend}: option {key}={value!r} must be one of {', '.join(choices)}")
    return value
