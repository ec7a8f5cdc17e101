"""Chains of two elementwise ops for the Coder's cold start (`[distill] chains`): every chain is a valid problem
at its small and alt sizes, each language's fused solution passes its static rules (and, for CUDA, NVRTC),
distillation verifies the Triton ones and keeps them with provenance, drawing chains leaves the variants a seed
chooses unchanged, and the decontamination list holds them."""

from __future__ import annotations

import ast
import json

import pytest

from kzcore.plugins import new_plugin_manager
from kzcore.problems import apply_size_profile, import_module_from_file, load_problems
from kzcore.train import variants as V
from kzcore.train.distill import distill
from kzcore.train.family import CHAIN_OPS, chain_problems
from kzcore.types import EvalConfig

PAIRS = len(CHAIN_OPS) * (len(CHAIN_OPS) - 1)


@pytest.fixture(scope="module")
def pm():
    return new_plugin_manager(load_entry_points=False, extra=["kz_suites", "kz_triton", "kz_cuda"])


@pytest.fixture(scope="module")
def every_chain(pm):
    return V.chain_variants(["triton", "cuda"], PAIRS, seed=0, pm=pm)


def test_every_chain_is_a_problem_whose_model_runs_at_small_and_alt(every_chain, tmp_path):
    import torch

    names = [v.name for v in every_chain]
    assert len(names) == PAIRS == len(set(names)) and all(n.startswith("fam_chain_") for n in names)
    assert {v.kind for v in every_chain} == {"chain"} and not set(names) & {p.name for p in V.family_problems()}
    for i, v in enumerate(every_chain):
        ops = v.name.removeprefix("fam_chain_")
        assert sum("x = " in line for line in v.problem.source.splitlines()) >= 2, v.name  # one statement an op
        path = tmp_path / f"chain_{i}.py"
        path.write_text(v.problem.source)
        module = import_module_from_file(path, f"kz_chain_test_{i}")
        for profile in ("small", "alt"):
            assert apply_size_profile(module, profile) == profile, v.name
            torch.manual_seed(0)
            out = module.Model(*module.get_init_inputs())(*module.get_inputs())
            assert out.dim() == 3 and bool(torch.isfinite(out).all()), (v.name, ops)
            assert float(out.std()) > 0, v.name  # not a constant: a kernel must compute it


def test_chains_are_drawn_by_seed_and_bounded(pm):
    a = [v.name for v in V.chain_variants(["triton"], 12, seed=3, pm=pm)]
    assert a == [v.name for v in V.chain_variants(["triton"], 12, seed=3, pm=pm)] and len(a) == 12
    assert a != [v.name for v in V.chain_variants(["triton"], 12, seed=4, pm=pm)]
    assert V.chain_variants(["triton"], 0, seed=3, pm=pm) == []
    assert len(chain_problems(10**6, 0)) == PAIRS
    # a language nobody registered writes none
    assert V.chain_variants(["triton"], 5, 0, pm=new_plugin_manager(load_entry_points=False, extra=[])) == []


def _cuda_source(module_source: str) -> str:
    tree = ast.parse(module_source)
    (value,) = [n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "SOURCE"]
    return value


def test_every_cuda_chain_passes_the_static_rules_and_nvrtc(every_chain):
    from kz_cuda import Cuda
    from kz_cuda.compile import compile_cuda
    from kz_triton import Triton

    for v in every_chain:
        assert set(v.solutions) == {"triton", "cuda"}
        assert Triton().static_check(v.solutions["triton"]) == [], v.name
        assert Cuda().static_check(v.solutions["cuda"]) == [], v.name
        kernel = f"{v.name.removeprefix('fam_')}_kernel"
        assert f'extern "C" __global__ void {kernel}(' in v.solutions["cuda"]
        compile_cuda(_cuda_source(v.solutions["cuda"]), arch="sm_90")  # raises CompileError with NVRTC's log


def test_distill_verifies_chains_and_keeps_the_variants_a_seed_chooses(plugins, tmp_path, own_workers):
    pm = plugins("kz_triton", "kz_cuda")
    problems = [p for p in load_problems("builtin") if p.name == "1_ReLU"]
    common = dict(solutions="builtin", workers=1, variants=3, variant_seed=0, pm=pm)
    plain = distill(problems, ["triton"], tmp_path / "plain", EvalConfig(trials=1), **common)
    # seed 0's first 30 chains hold every op of CHAIN_OPS, so each op's Triton lines are verified here
    assert {op for c in chain_problems(30, 0) for op in c.member.ops} == set(CHAIN_OPS)
    chained = distill(problems, ["triton"], tmp_path / "chained", EvalConfig(trials=1), chains=30, **common)
    assert chained.variants["triton"] == {"generated": plain.variants["triton"]["generated"] + 30,
                                          "evaluated": 3 + 30, "verified": 3 + 30, "kept": 3 + 30}  # fmt: skip

    def rows(out):
        return [json.loads(x) for x in (out / "sft.jsonl").read_text().splitlines()]

    before = {r["problem"] for r in rows(tmp_path / "plain")}
    after = {r["problem"]: r for r in rows(tmp_path / "chained")}
    assert before <= set(after)  # the same variants chosen; the chains come on top
    chains = {name: r for name, r in after.items() if name.startswith("fam_chain_")}
    assert len(chains) == 30
    prov = next(iter(chains.values()))["provenance"]
    assert prov["teacher"] == "variants:chain" and prov["variant_kind"] == "chain"
    # a chain named in drop_variants (a near-duplicate of a held-out problem) is not drawn in
    dropped = chain_problems(6, 0)[0].name
    again = distill(problems, ["triton"], tmp_path / "dropped", EvalConfig(trials=1), chains=6,
                    drop_variants={dropped}, **{**common, "variants": 0})  # fmt: skip
    assert again.variants["triton"]["kept"] == 5
    assert dropped not in {r["problem"] for r in rows(tmp_path / "dropped")}


def test_the_decontamination_list_holds_the_chains(pm, tmp_path):
    from kzcore.train.config import load_config
    from kzcore.train.tasks import training_problems

    def names(chains: int) -> set[str]:
        path = tmp_path / f"chains{chains}.toml"
        path.write_text(f'[distill]\nchains = {chains}\n[plugins]\nlanguages = ["triton"]\n')
        return {p.name for p in training_problems(load_config(path), [], [], pm)}

    drawn = {v.name for v in V.chain_variants(["triton"], 5, 0, pm=pm)}
    assert names(5) - names(0) == drawn and len(drawn) == 5
