"""experiments/kernelbench/report.py on two synthetic runs of one seed (CA-GRPO and its SFT control, both
starting from one SFT model): per-model rows recomputed from the per-sample verdicts, over the kept problems
and the clean ones, with intervals, and the paired differences."""

from __future__ import annotations

import json

import pytest

from kzcore.results import ResultsWriter
from kzcore.types import EvalResult, Status

PROBLEMS = ["kernelbench:level1/1_A", "kernelbench:level1/2_B", "kernelbench:level2/3_C", "kernelbench:level2/4_D"]


def write_run(run, arm_final: dict[str, int], sft: dict[str, int], flagged=("kernelbench:level2/4_D",)):
    """A run whose SFT model solves ``sft[name]`` of 4 samples of each problem and whose final model (02-coder)
    ``arm_final[name]``; 4_D is flagged by the problem check; 2_B is contaminated."""
    run.mkdir(parents=True)
    record = {"problem_check": True, "problems": PROBLEMS, "flagged": {f: "degenerate" for f in flagged}}
    (run / "heldout-problems.json").write_text(json.dumps(record))
    clean = {p: None for p in PROBLEMS if "2_B" not in p}
    (run / "decontamination.json").write_text(json.dumps({"clean": clean, "contaminated": {PROBLEMS[1]: []}}))
    rows = []
    for phase, solved in (("00-sft", sft), ("02-coder", arm_final)):
        writer = ResultsWriter(run / "heldout" / phase / "results-cuda.jsonl")
        for label in PROBLEMS:
            level, name = int(label.split("level")[1][0]), label.rsplit("/", 1)[1]
            for s in range(4):
                ok = s < solved.get(name, 0)
                writer.write(EvalResult(problem=name, language="cuda", level=level, sample=s,
                                        status=Status.CORRECT if ok else Status.INCORRECT,
                                        speedup=1.5 if ok else None))  # fmt: skip
        writer.close()
        rows.append({"phase": phase, "heldout_cuda_statuses": {"correct": 1}, "heldout_problems": 3})
    rows.insert(1, {"phase": "01-coder", "validation_cuda_pass@1": 0.1})  # a phase between the ends: not scored
    (run / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_rows_and_paired_differences(tmp_path):
    from experiments.kernelbench.report import main

    sft = {"1_A": 2, "2_B": 4}
    write_run(tmp_path / "grpo", {"1_A": 4, "2_B": 4, "3_C": 2}, sft)
    write_run(tmp_path / "ctl", {"1_A": 2, "2_B": 4}, sft)
    out = tmp_path / "report" / "kb"
    assert main([f"ca-grpo-s0={tmp_path / 'grpo'}", f"sft-s0={tmp_path / 'ctl'}", "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    final = {(r["model"], r["phase"], r["level"]): r for r in report["rows"]}
    row = final[("ca-grpo-s0", "02-coder", "all")]
    # 4_D flagged: 3 problems; pass@1 (1 + 1 + 0.5) / 3; the clean ones (1_A, 3_C) (1 + 0.5) / 2
    assert row["pass@1"]["problems"] == 3 and row["pass@1"]["mean"] == pytest.approx(2.5 / 3)
    assert row["clean_pass@1"]["problems"] == 2 and row["clean_pass@1"]["mean"] == pytest.approx(0.75)
    assert row["pass@4"]["mean"] == pytest.approx(1.0) and row["fast_1"]["mean"] == pytest.approx(2.5 / 3)
    low, high = row["pass@1"]["ci95"]
    assert 0.5 <= low <= row["pass@1"]["mean"] <= high <= 1.0
    assert final[("ca-grpo-s0", "02-coder", 2)]["pass@1"]["mean"] == pytest.approx(0.5)  # 3_C alone on level 2
    assert ("ca-grpo-s0", "01-coder", "all") not in final  # only scored phases
    diffs = {(c["arm"], c["vs"]): c for c in report["comparisons"] if "seed" in c}
    assert diffs[("ca-grpo", "SFT")]["mean"] == pytest.approx((0.5 + 0 + 0.5) / 3)
    assert diffs[("ca-grpo", "sft")]["mean"] == pytest.approx((0.5 + 0 + 0.5) / 3)
    assert diffs[("sft", "SFT")]["mean"] == pytest.approx(0.0)
    across = [c["across_seeds"] for c in report["comparisons"] if "across_seeds" in c]
    assert all(s["t95"] is None and s["seeds"] == 1 for s in across)  # one seed: no interval across seeds
    text = out.with_suffix(".md").read_text()
    assert text.startswith("## Held-out: KernelBench") and "| ca-grpo-s0 | 02-coder | all | cuda | 3 | 0.833 [" in text


def test_a_run_without_held_out_records_is_refused(tmp_path, capsys):
    from experiments.kernelbench.report import main

    (tmp_path / "run").mkdir()
    with pytest.raises(SystemExit) as exc:
        main([f"ca-grpo-s0={tmp_path / 'run'}", "--out", str(tmp_path / "r")])
    assert exc.value.code == 2 and "no heldout-problems.json" in capsys.readouterr().err


def test_across_seeds_each_trained_model_counts_once():
    from experiments.kernelbench.report import t_interval

    mean, low, high = t_interval([0.1, 0.2, 0.3])
    assert mean == pytest.approx(0.2) and high - mean == pytest.approx(4.303 * 0.1 / 3**0.5)
    assert t_interval([0.2]) is None
