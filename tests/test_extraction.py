"""The default source extraction: completions (fences, several blocks, reasoning) -> candidate source."""

from __future__ import annotations

from kzcore.builtins.extraction import extract_source

REAL = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x  # real\n"
DRAFT = REAL.replace("# real", "# draft")
DECOY = REAL.replace("# real", "# decoy from the reasoning")


def fenced(body: str, tag: str = "python") -> str:
    return f"```{tag}\n{body}```\n"


def test_single_fenced_block():
    assert extract_source(f"Here is the kernel:\n\n{fenced(REAL)}\nIt is fast.") == REAL


def test_fence_tag_does_not_matter():
    for tag in ("python", "py", "triton", ""):
        assert extract_source(fenced(REAL, tag)) == REAL


def test_last_block_defining_model_new_wins():
    usage = fenced("model = ModelNew()\nmodel(x)\n")  # a later block without the class is not the answer
    completion = f"First try:\n{fenced(DRAFT)}\nBetter:\n{fenced(REAL)}\nUse it like this:\n{usage}"
    assert extract_source(completion) == REAL


def test_think_block_decoy_is_ignored():
    completion = f"<think>\nMaybe:\n{fenced(DECOY)}\nno, better not.\n</think>\nFinal answer:\n{fenced(REAL)}"
    assert extract_source(completion) == REAL


def test_think_block_alone_yields_nothing():
    # the only ModelNew is inside the reasoning: reasoning is never the answer
    completion = f"<think>\n{fenced(DECOY)}</think>\nI could not finish."
    assert extract_source(completion) == ""


def test_unterminated_think_hides_everything_after_it():
    assert extract_source(f"<think>\nstill thinking\n{fenced(DECOY)}") == ""


def test_unterminated_fence_runs_to_the_end():
    completion = f"Answer:\n```python\n{REAL}"
    assert extract_source(completion) == REAL


def test_unfenced_raw_module():
    assert extract_source("\n\n" + REAL + "\n\n") == REAL


def test_nothing_usable():
    assert extract_source("I cannot help with that.") == ""
    assert extract_source("") == ""
    assert extract_source(fenced("def helper():\n    return 1\n")) == ""
    # prose naming the class next to a fence that lacks it is not code
    assert extract_source("Define class ModelNew like this:\n" + fenced("x = 1\n")) == ""
