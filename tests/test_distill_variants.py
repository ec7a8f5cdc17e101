"""Verified variants for cold start: generated size variants and op-family problems are valid KernelBench
problems, held-out names remove what derives from them, distillation keeps only variants the evaluator files
correct (with provenance), and the teacher's reasoning and token budget follow the distill config."""

from __future__ import annotations

import ast
import json
import re

import attrs
import pytest

from kz_suites import BUILTIN_SUITE
from kzcore import Language
from kzcore.plugins import new_plugin_manager
from kzcore.policy import Completion
from kzcore.problems import apply_size_profile, import_module_from_file, load_problems
from kzcore.train import variants as V
from kzcore.train.distill import distill
from kzcore.types import EvalConfig

BUILTIN = load_problems("builtin")
ORIGINAL = {p.name: p for p in BUILTIN}
SOLUTIONS = BUILTIN_SUITE / "solutions/triton"


@pytest.fixture(scope="module")
def generated():
    # the op family's solutions are the languages' own (Language.variant_solution): both plugins registered
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_suites", "kz_triton", "kz_cuda"])
    return V.generate(BUILTIN, ["triton", "cuda"], pm=pm)


def _constants(source: str) -> dict[str, int]:
    tree = ast.parse(source)
    return {
        n.targets[0].id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign)
        and isinstance(n.targets[0], ast.Name)
        and isinstance(n.value, ast.Constant)
        and type(n.value.value) is int
    }


def test_every_variant_problem_loads_and_its_model_runs_at_small_and_alt(generated, tmp_path):
    import torch

    names = [v.name for v in generated]
    assert len(names) == len(set(names)) and not set(names) & set(ORIGINAL)
    assert {"size", "family", "fp16"} <= {v.kind for v in generated}
    for i, v in enumerate(generated):
        path = tmp_path / f"variant_{i}.py"
        path.write_text(v.problem.source)
        module = import_module_from_file(path, f"kz_variant_test_{i}")
        for profile in ("small", "alt"):
            if apply_size_profile(module, profile) != profile:
                assert profile == "alt", f"{v.name} has no small profile"
                continue
            torch.manual_seed(0)
            model = module.Model(*module.get_init_inputs())
            inputs = module.get_inputs()
            out = model(*inputs)
            assert isinstance(out, torch.Tensor) and out.numel() > 0, v.name
            if v.kind == "fp16":
                assert inputs[0].dtype == torch.float16 and out.dtype == torch.float16


def test_size_variants_shrink_keep_divisibility_and_state_their_sizes(generated):
    sizes = [v for v in generated if v.kind == "size"]
    assert {v.origin for v in sizes} >= {"1_ReLU", "3_Sigmoid", "19_Matmul", "1_Gemm_BiasAdd_ReLU"}
    for v in sizes:
        assert re.fullmatch(rf"{re.escape(v.origin)}__v\d", v.name)
        before, after = _constants(ORIGINAL[v.origin].source), _constants(v.problem.source)
        changed = {k for k in before if after[k] != before[k]}
        assert changed, v.name
        for k in changed:
            assert after[k] < before[k] and (before[k] % 16 or after[k] % 16 == 0), (v.name, k)
            assert f"{k}={after[k]}" in v.problem.source.split('"""')[1], v.name  # the docstring says so
        profiles = ast.literal_eval(v.problem.source.split("KZ_SIZES = ")[1])
        assert all(size <= after[k] for p in profiles.values() for k, size in p.items()), v.name
        reference = SOLUTIONS / f"level{v.problem.level}" / f"{v.origin}.py"
        assert v.solutions["triton"] == reference.read_text()


def test_the_op_family_has_triton_and_cuda_solutions_and_records_its_op(generated):
    family = {v.name: v for v in generated if v.kind == "family"}
    unary = [v for v in family.values() if v.op in {e.op for e in V.ELEMENTWISE} and "a, b" not in v.problem.source]
    assert len(unary) >= 12
    assert {"fam_row_sum", "fam_row_mean_keepdim", "fam_row_max"} <= set(family)
    for v in family.values():
        assert v.origin == v.op and set(v.solutions) == {"triton", "cuda"}
        assert "@triton.jit" in v.solutions["triton"] and 'extern "C" __global__' in v.solutions["cuda"]
        assert "class Model(" in v.problem.source and "class ModelNew(" in v.solutions["triton"]


class ReluOnly(Language):
    """Writes a solution to the float32 relu member only, naming what it was given."""

    name = "relu-only"

    def variant_solution(self, member):
        if member.family == "elementwise" and member.op == "relu" and not member.fp16:
            return f"# {member.summary}: {member.inputs}\n{member.init_source}"
        return None


def test_family_solutions_are_the_languages_own():
    """The core writes the problems; a family member is offered only where a language writes its solution."""
    kept = V.family_variants([ReluOnly(), Language(name="none")])  # the default writes none
    assert [(v.name, v.kind, v.op, v.solutions) for v in kept] == [
        ("fam_relu", "family", "relu", {"relu-only": "# ReLU: ('x',)\n    def __init__(self):\n        super().__init__()\n"}),
    ]  # fmt: skip
    assert "torch.relu(x)" in kept[0].problem.source and kept[0].problem.suite == "variants"
    # a language nobody registered writes no family solutions: only the size variants of its reference solutions
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_suites"])
    assert {v.kind for v in V.generate(BUILTIN, ["triton"], pm=pm)} == {"size"}


def test_exclusion_drops_the_heldout_origin_and_its_op_only(generated):
    kept = {v.name for v in V.exclude_heldout(generated, ["3_Sigmoid"])}
    dropped = {v.name for v in generated} - kept
    assert dropped == {v.name for v in generated if v.origin == "3_Sigmoid"} | {"fam_sigmoid", "fam_sigmoid__fp16"}
    assert {"fam_relu", "fam_sigmoid_gate", "1_ReLU__v1", "2_Gemm_Scale_Sigmoid__v1"} <= kept

    kept = {v.name for v in V.exclude_heldout(generated, ["2_GELU", "7_SumReduction", "2_Gemm_Scale_Sigmoid"])}
    for name in ("fam_gelu", "fam_gelu_tanh", "2_GELU__v1", "fam_row_sum_keepdim", "7_SumReduction__v1"):
        assert name not in kept
    assert "fam_sigmoid" not in kept and "2_Gemm_Scale_Sigmoid__v1" not in kept
    assert {"fam_row_mean", "fam_silu", "3_Gemm_GELU_Residual__v1"} <= kept  # a fusion goes only with itself
    assert V.ops_named("19_ReLU") == {"relu"} and V.ops_named("4_LeakyReLU") == {"leaky_relu"}


def test_choice_is_deterministic_and_bounded(generated):
    a, b = V.choose(generated, 5, seed=1), V.choose(generated, 5, seed=1)
    assert [v.name for v in a] == [v.name for v in b] and len(a) == 5
    assert [v.name for v in V.choose(generated, 5, seed=2)] != [v.name for v in a]
    assert V.choose(generated, 0, seed=1) == [] and V.choose(generated, None, seed=1) == []
    assert len(V.choose(generated, 10**6, seed=0)) == len(generated)


def _broken(v: V.Variant) -> V.Variant:
    """A copy of ``v`` whose Triton solution computes the wrong thing (x + 1 instead of sigmoid)."""
    source = v.solutions["triton"].replace("y = 1.0 / (1.0 + tl.exp(-x))", "y = x + 1.0")
    assert source != v.solutions["triton"]
    problem = attrs.evolve(v.problem, name="fam_broken")
    return attrs.evolve(v, problem=problem, solutions={**v.solutions, "triton": source}, origin="broken", op="")


def test_distill_keeps_only_verified_variants_with_provenance(plugins, tmp_path, monkeypatch, generated, own_workers):
    pm = plugins("kz_triton", "kz_cuda")
    by_name = {v.name: v for v in generated}
    injected = [by_name["fam_relu"], by_name["3_Sigmoid__v1"], by_name["fam_softplus"], _broken(by_name["fam_sigmoid"])]
    monkeypatch.setattr(V, "generate", lambda *a, **k: injected)
    problems = [ORIGINAL["1_ReLU"]]
    summary = distill(
        problems, ["triton", "cuda"], tmp_path, EvalConfig(trials=2), solutions="builtin", workers=1,
        variants=10, exclude=["5_Softplus"], pm=pm,
    )  # fmt: skip
    assert summary.variants["triton"] == {"generated": 3, "evaluated": 3, "verified": 2, "kept": 2}
    cuda = summary.variants["cuda"]
    assert cuda["evaluated"] == 3 and cuda["kept"] == cuda["verified"]
    import torch

    if not torch.cuda.is_available():
        assert cuda["verified"] == 0  # CUDA candidates cannot run on a CPU machine: not correct, not kept
    rows = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    triton = {r["problem"]: r for r in rows if r["language"] == "triton"}
    assert set(triton) == {"1_ReLU", "fam_relu", "3_Sigmoid__v1"}
    fam = triton["fam_relu"]["provenance"]
    assert (fam["teacher"], fam["variant"], fam["variant_kind"], fam["variant_of"]) == (
        "variants:family", "fam_relu", "family", "relu",
    )  # fmt: skip
    size = triton["3_Sigmoid__v1"]["provenance"]
    assert (size["variant_kind"], size["variant_of"], size["origin"]) == ("size", "3_Sigmoid", "variant:size:3_Sigmoid")
    assert triton["1_ReLU"]["provenance"]["variant"] is None
    assert "batch_size = 16384" in triton["3_Sigmoid__v1"]["prompt"][-1]["content"]
    assert triton["fam_relu"]["completion"][0]["content"].startswith("```python\n")
    # the problems with a verified solution, in the languages they were verified in: tasks = "coldstart"
    verified = {r["name"]: r for r in map(json.loads, (tmp_path / "problems.jsonl").read_text().splitlines())}
    assert set(verified) == {r["problem"] for r in rows}
    assert "triton" in verified["fam_relu"]["languages"] and verified["3_Sigmoid__v1"]["level"] == 1
    assert "batch_size = 16384" in verified["3_Sigmoid__v1"]["code"]
    fam_relu = triton["fam_relu"]["completion"][0]["content"]
    assert verified["fam_relu"]["solution_chars"]["triton"] == len(fam_relu)


class RecordingTeacher:
    """Answers every prompt with reasoning then the ReLU reference in a fence; records its SamplingParams."""

    name = "recording-teacher"
    SOLUTION = (SOLUTIONS / "level1/1_ReLU.py").read_text()

    def __init__(self):
        self.params = []

    def generate(self, prompts, params):
        self.params.append(params)
        text = f"Plan: one program per block of 1024 elements.\n```python\n{self.SOLUTION}```\nDone."
        return [[Completion(text=text, prompt_index=i, sample_index=s) for s in range(params.n)] for i in range(len(prompts))]  # fmt: skip

    def close(self):
        pass


def test_keep_reasoning_and_the_teachers_token_budget(plugins, tmp_path, own_workers):
    pm = plugins("kz_triton")
    teacher = RecordingTeacher()
    problems = [ORIGINAL["1_ReLU"]]
    common = dict(teacher=teacher, k=1, workers=1, pm=pm)
    distill(problems, ["triton"], tmp_path, EvalConfig(trials=1), keep_reasoning=False, max_new_tokens=777, **common)
    code_only = json.loads((tmp_path / "sft.jsonl").read_text())["completion"][0]["content"]
    assert [p.max_new_tokens for p in teacher.params] == [777]
    assert code_only == f"```python\n{RecordingTeacher.SOLUTION.rstrip()}\n```"
    # same directory: the completion and its verdict are reused, only the kept text changes
    distill(problems, ["triton"], tmp_path, EvalConfig(trials=1), keep_reasoning=True, **common)
    whole = json.loads((tmp_path / "sft.jsonl").read_text())["completion"][0]["content"]
    assert whole.startswith("Plan: one program") and whole.endswith("Done.") and RecordingTeacher.SOLUTION in whole


def test_trainer_passes_the_distill_keys_and_its_heldout_names(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from kzcore.train import trainer as trainer_mod
    from kzcore.train.config import DistillSection, TrainConfig
    from kzcore.train.context import RunContext
    from kzcore.train.distill import DistillSummary
    from kzcore.train.tasks import RunProblems

    seen = {}

    def fake_distill(problems, languages, out_dir, config, **kwargs):
        seen.update(kwargs)
        return DistillSummary(1, 1, 1, "d", "r", "", {"triton": {"generated": 3, "evaluated": 2, "verified": 1, "kept": 1}})  # fmt: skip

    monkeypatch.setattr(trainer_mod, "distill", fake_distill)
    section = DistillSection(variants=7, variant_seed=3, keep_reasoning=False, max_new_tokens=512)
    executor = object()  # the run's one executor: distillation evaluates through it
    config = attrs.evolve(TrainConfig(), distill=section)
    heldout = [ORIGINAL["3_Sigmoid"], ORIGINAL["2_GELU"]]
    context = RunContext(config, executor=executor)
    validation = [ORIGINAL["1_ReLU"]]  # [heldout] validation problems: never distilled either
    problems = RunProblems(context, heldout, coldstart=[], near={(1, "fam_gelu")}, validation=validation)
    fake = SimpleNamespace(config=config, pm=None, context=context, problems=problems)
    out = trainer_mod.Trainer.distill(fake, None, tmp_path)
    keys = ("variants", "variant_seed", "keep_reasoning", "max_new_tokens")
    assert [seen[k] for k in keys] == [7, 3, False, 512]
    assert seen["executor"] is executor
    assert seen["exclude"] == ["3_Sigmoid", "2_GELU", "1_ReLU"] and out["variants"]["triton"]["kept"] == 1
    assert seen["drop_variants"] == {"fam_gelu"}  # [heldout] decontaminate = "drop-train"'s near-duplicates
    assert DistillSection() == DistillSection(variants=0, variant_seed=0, keep_reasoning=True, max_new_tokens=4096)
