"""The core's defaults for the per-language hooks: each asks the registered `Language` object of the hook's
``language`` (its ``static_check``, ``load_candidate``, ``instrument``, ...). They are ``trylast``, so a
plugin's own implementation of any of these hooks still answers first, and wrappers still wrap them. A
language nobody registered gets the answer "not mine" (None), as from a plugin that does not know it.

Unlike the other built-ins this plugin is an object bound to the manager it answers for (`for_manager`):
it looks languages up in that manager's registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kzcore import hookimpl
from kzcore.language import Language


class LanguageDefaults:
    def __init__(self, pm):
        self.pm = pm

    def _language(self, name: str) -> Language | None:
        from kzcore.plugins import languages

        return languages(self.pm).items.get(name)

    def _ask(self, language: str, question: Callable[[Language], Any]) -> Any:
        registered = self._language(language)
        return None if registered is None else question(registered)

    # -- kz process -------------------------------------------------------------------------------------
    @hookimpl(trylast=True)
    def kz_extract_source(self, language, completion):
        from kzcore.builtins.extraction import extract_source

        registered = self._language(language)  # one nobody registered: the core's extraction, no fence tags
        return extract_source(completion) if registered is None else registered.extract_source(completion)

    @hookimpl(trylast=True)
    def kz_static_check(self, language, source):
        return self._ask(language, lambda lang: lang.static_check(source))

    @hookimpl(trylast=True)
    def kz_prepare_candidates(self, language, sources, config):
        return self._ask(language, lambda lang: lang.prepare_candidates(sources, config))

    @hookimpl(trylast=True)
    def kz_prompt_sections(self, language, problem, template):
        return self._ask(language, lambda lang: lang.prompt_sections(problem, template))

    # -- evaluator worker -------------------------------------------------------------------------------
    @hookimpl(trylast=True)
    def kz_worker_started(self, device):
        from kzcore.plugins import languages

        for language in languages(self.pm).items.values():
            language.worker_started(device)

    @hookimpl(trylast=True)
    def kz_load_candidate(self, language, path, device):
        return self._ask(language, lambda lang: lang.load_candidate(path, device))

    @hookimpl(trylast=True)
    def kz_instrument_candidate(self, language, module):
        return self._ask(language, lambda lang: lang.instrument(module))

    @hookimpl(trylast=True)
    def kz_kernel_names(self, language, module):
        return self._ask(language, lambda lang: lang.kernel_names(module))

    @hookimpl(trylast=True)
    def kz_precompile(self, language, model, inputs):
        return self._ask(language, lambda lang: lang.precompile(model, inputs))


def for_manager(pm) -> LanguageDefaults:
    """This plugin, answering for ``pm``'s registered languages."""
    return LanguageDefaults(pm)
