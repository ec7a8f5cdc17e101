"""The composer (kzcore/proposer/composer.py): every module it emits passes every Proposer gate, run again here
(the AST gate for its API set, a distinct dedup key, the runtime gates on the CPU at its small profile); the
coverage table counts what the modules use; the same seed composes the same modules; a candidate that fails a
gate or near-duplicates a held-out problem is dropped, counted and replaced; `kz compose` writes a problem
JSONL, the coverage table beside it and the Proposer's cold-start SFT rows."""

from __future__ import annotations

import json

import pytest

from kzcore.problems import load_problems
from kzcore.proposer.catalog import load_catalog
from kzcore.proposer.composer import DECONTAM, check_in_process, compose
from kzcore.proposer.gates import GATE_ORDER, check_ast, dedup_key, runtime_gates
from kzcore.types import Problem, ProblemReport

CATALOG = load_catalog()
SAMPLE = ["Conv2d", "Fold", "LayerNorm", "Softmax", "Matmul", "Argmax", "Prod", "Gather", "CrossEntropyLoss"]
SAMPLE += ["KLDivLoss", "HingeEmbeddingLoss", "ScaledDotProductAttention", "TransformerEncoderLayer", "Outer"]


@pytest.fixture(scope="module")
def full(whole_catalog):
    """The whole catalog, 3 modules per API (about 10 s on one CPU core)."""
    return compose(CATALOG)


def assert_all_gates_pass(modules) -> None:
    keys = set()
    for m in modules:
        check = check_ast(m.code, m.chain, CATALOG)
        assert check.ok, (m.name, check.result.reason)
        assert check.apis_used == m.apis and set(m.chain) <= set(m.apis)
        key = dedup_key(m.code, m.apis)
        assert key == m.dedup_key and key not in keys, m.name
        keys.add(key)
    reports = check_in_process([m.to_problem() for m in modules])
    for m, report in zip(modules, reports):
        gates = runtime_gates(report)
        assert all(g.ok for g in gates.values()) and len(gates) == len(GATE_ORDER) - 2, (m.name, report.reason)


def test_every_module_of_the_whole_catalog_passes_every_gate_and_every_api_is_covered(full):
    assert_all_gates_pass(full.modules)
    table = full.coverage_table(CATALOG)
    assert table["catalog_apis"] == len(CATALOG.apis) == 117
    assert table["covered"] == 117 and table["uncovered"] == [] and table["missing"] == 0
    assert table["modules"] == len(full.modules) == 3 * 117
    # every slot is a fresh candidate or a retry: the dropped ones are counted by the gate that dropped them
    assert full.candidates == len(full.modules) + sum(full.failures.values())
    assert full.decontaminated is None  # no held-out problems given
    names = [m.name for m in full.modules]
    assert len(set(names)) == len(names) and all(m.level in (1, 2, 3) for m in full.modules)
    # the API alone, then with one and with two other catalog APIs chained to it
    assert {len(m.chain) for m in full.modules} == {1, 2, 3}
    assert all(m.chain[0] == m.name.split("_")[1] for m in full.modules if m.name.endswith("_0"))


def test_the_coverage_table_counts_the_apis_each_module_uses(full):
    per_api = full.coverage(CATALOG)
    assert list(per_api) == CATALOG.names
    assert sum(per_api.values()) == sum(len(m.apis) for m in full.modules)
    assert per_api["ReLU"] == sum("ReLU" in m.apis for m in full.modules) >= 3
    some = compose(CATALOG, per_api=1, apis=["Sigmoid", "Conv1d"])
    table = some.coverage_table(CATALOG)
    assert table["per_api"]["Sigmoid"] == 1 and table["per_api"]["Conv1d"] == 1
    assert table["covered"] == 2 and len(table["uncovered"]) == 115 and table["modules"] == 2


def test_the_same_seed_composes_the_same_modules_and_each_api_draws_alone(full):
    again = compose(CATALOG, apis=SAMPLE)
    assert [m.to_json() for m in again.modules] == [m.to_json() for m in compose(CATALOG, apis=SAMPLE).modules]
    # each API has its own seeded draw: a subset composes what the whole catalog composed for it
    whole = {m.name: m.code for m in full.modules}
    assert {m.name: m.code for m in again.modules} == {m.name: whole[m.name] for m in again.modules}
    assert len(again.modules) == 3 * len(SAMPLE)
    other = compose(CATALOG, apis=SAMPLE, seed=1)
    assert [m.code for m in other.modules] != [m.code for m in again.modules]
    assert_all_gates_pass(other.modules)


def test_a_candidate_that_fails_a_gate_is_dropped_and_counted_never_emitted():
    def degenerate(problems, config=None):
        return [ProblemReport(problem=p.name, level=p.level, ok_runs=True, deterministic=True, finite=True,
                              degenerate=True, reason="output is ~0") for p in problems]  # fmt: skip

    result = compose(CATALOG, apis=["ReLU", "Conv2d"], check_problems=degenerate, attempts=3)
    assert result.modules == () and result.missing == 6
    assert result.failures == {"degenerate": 18} and result.candidates == 18
    with pytest.raises(Exception, match="no API named 'Nope'"):
        compose(CATALOG, apis=["Nope"])


def test_a_near_duplicate_of_a_heldout_problem_is_dropped_and_its_slot_composed_further():
    plain = compose(CATALOG, apis=["Tanh"])
    alone = plain.modules[0]
    assert alone.chain == ("Tanh",)
    heldout = [Problem(name="22_Tanh", source=alone.code.replace("B = ", "BATCH = "), level=1, suite="kernelbench")]
    result = compose(CATALOG, apis=["Tanh"], heldout=heldout)
    assert result.decontaminated == result.failures[DECONTAM] >= 1
    assert len(result.modules) == 3 and all(len(m.chain) >= 2 for m in result.modules)
    assert alone.code not in [m.code for m in result.modules]
    assert_all_gates_pass(result.modules)


def test_kz_compose_writes_problems_a_coverage_table_and_cold_start_rows(tmp_path, capsys):
    from kzcore.cli import main

    out = tmp_path / "composed.jsonl"
    argv = ["compose", "--apis", "ReLU,Conv2d", "--heldout", "--out", str(out), "--sft", str(tmp_path / "sft.jsonl")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "6 verified modules covering" in printed and "no decontamination" in printed
    problems = load_problems(str(out))
    assert [p.name for p in problems] == [f"composed_{a}_{i}" for a in ("ReLU", "Conv2d") for i in range(3)]
    table = json.loads((tmp_path / "composed.coverage.json").read_text())
    assert table["per_api"]["ReLU"] >= 3 and table["per_api"]["Conv2d"] >= 3 and table["modules"] == 6
    rows = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["completion"][0]["content"].startswith("```python\n") for r in rows)
    assert rows[0]["apis"] == ["ReLU"] and "ReLU" in rows[0]["prompt"][-1]["content"]
    # --sft-examples per-api: each row shows first a composed module that uses its API, never the row's own
    assert main([*argv, "--sft", str(tmp_path / "per-api.jsonl"), "--sft-examples", "per-api"]) == 0
    per_api = [json.loads(line) for line in (tmp_path / "per-api.jsonl").read_text().splitlines()]
    by_name = {p.name: p.source.strip() for p in problems}
    for row in per_api:
        user = row["prompt"][-1]["content"]
        shown = [n for n, src in by_name.items() if src in user]
        assert row["problem"] not in shown
        uses = {n: set(check_ast(by_name[n], [], CATALOG).apis_used) for n in by_name}
        others = [
            n for n in by_name if n != row["problem"] and uses[n] & set(row["apis"]) and uses[n] != set(row["apis"])
        ]
        assert bool(shown) == bool(others)
    assert [r["prompt"] for r in per_api] != [r["prompt"] for r in rows]


def test_kz_composes_default_keeps_clear_of_kernelbench_and_its_modules_pass_the_sandboxed_check(own_workers):
    """`kz compose`'s default: no module near-duplicates a KernelBench level 1 or 2 problem (kzcore.decontam's
    rule, checked again over the whole output), every API still covered; a sample of the modules passes the
    evaluator's problem check in a sandboxed worker too, not only in this process."""

    from kzcore import decontam
    from kzcore.evaluate.problem_check import check_problems
    from kzcore.types import EvalConfig

    heldout = [p for level in (1, 2) for p in load_problems(f"kernelbench:{level}")]  # kz_suites' copy
    result = compose(CATALOG, heldout=heldout)
    assert result.coverage_table(CATALOG)["covered"] == 117 and len(result.modules) == 351
    assert result.decontaminated == result.failures[DECONTAM] > 0
    assert decontam.decontaminate([m.to_problem() for m in result.modules], heldout).near_train == []
    sample = [m.to_problem() for m in result.modules if m.name.endswith("_2")][::10]
    reports = check_problems(sample, EvalConfig(device="cpu", size="small", trials=1), workers=1)
    assert [r.problem for r in reports] == [p.name for p in sample] and all(r.ok for r in reports)
