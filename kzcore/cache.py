"""Where kzcore and its plugins keep caches on disk: ``$KZ_CACHE/<name>``, else
``$XDG_CACHE_HOME/kzcore/<name>``, else ``~/.cache/kzcore/<name>`` (the rule kz_models' converted
checkpoints follow too). Evaluator workers never write here: their sandbox leaves every kzcore cache read-only,
but a subdirectory a language declares as its own compiler cache (`kzcore.executors.caches.writable_paths`)."""

from __future__ import annotations

import os
from pathlib import Path

PROBLEM_CHECKS = "problem-checks"  # kz eval's problem-check reports (kzcore.evaluate.problem_check)


def cache_root() -> Path:
    """The directory that holds every kzcore cache (not created here)."""
    if os.environ.get("KZ_CACHE"):
        return Path(os.environ["KZ_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "kzcore"


def cache_dir(name: str) -> Path:
    """The cache directory called ``name`` (e.g. ``"cuda-inline"``), created if missing."""
    path = cache_root() / name
    path.mkdir(parents=True, exist_ok=True)
    return path
