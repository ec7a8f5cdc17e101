"""Building Coder prompts through the prompt hooks; the only place that calls them."""

from __future__ import annotations

from kzcore.plugins import get_plugin_manager
from kzcore.types import Problem, PromptSection


def build_prompt(problem: Problem, language: str, template: str = "kernelbench", pm=None) -> list[dict[str, str]]:
    """Chat messages asking for a ``language`` solution of ``problem``."""
    pm = pm or get_plugin_manager()
    sections: list[PromptSection] = []
    for contributed in pm.hook.kz_prompt_sections(language=language, problem=problem, template=template):
        sections.extend(contributed or [])
    sections.sort(key=lambda s: s.order)
    return pm.hook.kz_format_prompt(language=language, problem=problem, sections=sections, template=template)
