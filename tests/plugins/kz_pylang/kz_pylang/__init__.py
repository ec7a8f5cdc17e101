"""kz_pylang: a toy kernel language whose "kernels" are plain PyTorch. It lives in its own folder with its
own pyproject.toml and registers through an entry point, as a third-party kernel-language plugin would (in
the ``kzcore.test`` group, loaded only under KZ_TEST_PLUGINS=1), and it imports only from ``kzcore``;
docs/plugins.md walks through it. Its worker environment variable and cache directory exist to show that a
third-party language gets what the bundled ones get (tests/test_languages.py)."""

import os
from pathlib import Path

from kzcore import Language, PromptSection, hookimpl, import_module_from_file

CACHE_ENV = "KZ_PYLANG_CACHE"  # where its (pretend) compiler cache lives, when set (tests set it)


class PyLang(Language):
    """The whole language: a subclass of kzcore.Language, registered once. The core asks it everything."""

    name = "python"
    description = "plain PyTorch modules (test language)"
    guard_torch_ops = False  # its candidates *are* PyTorch

    def static_check(self, source):
        return [] if "class ModelNew" in source else ["no `class ModelNew` defined"]

    def load_candidate(self, path, device):
        return import_module_from_file(path, path.stem)

    def prompt_sections(self, problem, template):
        return [PromptSection("Rules", "Write ModelNew in plain PyTorch.", order=20)]

    def worker_environment(self, device):
        return {"KZ_PYLANG_DEVICE": device}

    def writable_caches(self):
        return [Path(os.environ[CACHE_ENV])] if os.environ.get(CACHE_ENV) else []


PYLANG = PyLang()


@hookimpl
def kz_register_languages(register):
    register(PYLANG)


class EchoPolicy:
    """A policy registered by entry point from outside the core: it answers each Coder prompt with the
    prompt's own architecture renamed to ModelNew, which is a correct "python"-language solution.
    ``pylang-echo:SECONDS`` sleeps SECONDS before every batch but the first: a slow model, for Ctrl-C tests."""

    name = "pylang-echo"

    def __init__(self, delay: float = 0.0):
        self.delay = delay
        self.batches = 0

    def generate(self, prompts, params):
        import re
        import time

        if self.batches and self.delay:
            time.sleep(self.delay)
        self.batches += 1

        from kzcore import Completion, code_blocks

        out = []
        for i, chat in enumerate(prompts):
            blocks = [body for _tag, body in code_blocks(chat[-1]["content"]) if "class Model(" in body]
            text = "```python\n" + re.sub(r"\bclass Model\(", "class ModelNew(", blocks[-1]) + "```" if blocks else ""
            out.append([Completion(text=text, prompt_index=i, sample_index=s) for s in range(params.n)])
        return out

    def close(self):
        pass


@hookimpl
def kz_register_policies(register):
    register("pylang-echo", lambda arg: EchoPolicy(delay=float(arg or 0)))
