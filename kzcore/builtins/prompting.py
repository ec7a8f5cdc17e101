"""Default prompt sections (task, problem source, optional optimisation principles) and chat formatting."""

from __future__ import annotations

from kzcore import hookimpl
from kzcore.types import PromptSection

SYSTEM = (
    "You are an expert GPU kernel engineer. You write correct, fast kernels and explain nothing you are not asked to."
)

TASK = (
    "Replace the PyTorch operators in the architecture below with custom {language} kernels for speedups. "
    "Name the optimized architecture ModelNew; it must take the same constructor arguments as Model and "
    "create the same parameters in the same order. Output the complete new module in one fenced code block. "
    "Do not call PyTorch compute operators in forward: every operation must run in your own kernels."
)

PRINCIPLES = """Apply these optimisation principles where they pay:
- Tiling: process the data in blocks that fit registers/shared memory; choose block sizes that are powers of two.
- Fusion: fuse consecutive operations into one kernel so intermediates never go to global memory.
- Pipelining: overlap loads of the next tile with compute on the current one (num_stages / software pipelining).
- Reordering: reorder loops and memory accesses so loads are coalesced and reductions stay in registers."""

TEMPLATES = ("kernelbench", "principles")

# KernelBench's one-shot example problem; each language plugin supplies its own answer to it.
EXAMPLE_ARCHITECTURE = """import torch
from torch import nn


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(4096, 4096), torch.randn(4096, 4096)]


def get_init_inputs():
    return []
"""


def one_shot(answer: str) -> str:
    """The one-shot example section: the example architecture, then ``answer`` (a fenced solution)."""
    return f"Given this architecture:\n```python\n{EXAMPLE_ARCHITECTURE}```\na correct answer is:\n{answer}"


@hookimpl(trylast=True)
def kz_prompt_sections(language, problem, template):
    sections = [
        PromptSection("Task", TASK.format(language=language), order=0),
        PromptSection("Architecture to optimize", f"```python\n{problem.source.rstrip()}\n```", order=80),
    ]
    if template == "principles":
        sections.append(PromptSection("Optimisation principles", PRINCIPLES, order=60))
    return sections


@hookimpl(trylast=True)
def kz_format_prompt(language, problem, sections, template):
    body = "\n\n".join(f"## {s.title}\n\n{s.body.strip()}" for s in sections)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": body}]
