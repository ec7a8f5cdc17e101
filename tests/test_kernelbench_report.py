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
    diffs = {(c["arm"], c["vs"]): c for c in report["comparisons"] if "seed" in c and c["metric"] == "pass@1"}
    assert diffs[("ca-grpo", "SFT")]["mean"] == pytest.approx((0.5 + 0 + 0.5) / 3)
    assert diffs[("ca-grpo", "sft")]["mean"] == pytest.approx((0.5 + 0 + 0.5) / 3)
    assert diffs[("sft", "SFT")]["mean"] == pytest.approx(0.0)
    assert ("sft", "ca-grpo") not in diffs  # each pair once: the method against its control
    across = [c["across_seeds"] for c in report["comparisons"] if "across_seeds" in c]
    assert all(s["t95"] is None and s["seeds"] == 1 for s in across)  # one seed: no interval across seeds
    text = out.with_suffix(".md").read_text()
    assert text.startswith("## Held-out: KernelBench") and "| ca-grpo-s0 | 02-coder | all | cuda | 3 | 0.833 [" in text
    assert "## Self-play" in text and report["self_play"]["sft-s0"]["rounds"] == []  # no pool: nothing proposed
    assert out.with_suffix(".png").stat().st_size > 0


def test_records_committed_gzipped_give_the_same_report(tmp_path):
    """Runs' records are committed with their JSONL gzipped (a KernelBench evaluation's completions and verdicts
    are megabytes, and every GPU call carries the tracked tree): the report reads them the same."""
    import gzip

    from experiments.kernelbench.report import main

    sft = {"1_A": 2, "2_B": 4}
    for name in ("plain", "packed"):
        write_run(tmp_path / name / "grpo", {"1_A": 4, "3_C": 2}, sft)
    for path in (tmp_path / "packed").rglob("*.jsonl"):
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    reports = []
    for name in ("plain", "packed"):
        out = tmp_path / f"report-{name}" / "kb"
        assert main([f"ca-grpo-s0={tmp_path / name / 'grpo'}", "--out", str(out)]) == 0
        reports.append(json.loads(out.with_suffix(".json").read_text())["rows"])
    assert reports[0] == reports[1] and {r["language"] for r in reports[1]} == {"cuda"}


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


def test_self_play_rounds_and_targets(tmp_path):
    """Round 1: 4 modules, 2 accepted (one measured at the frontier, one never solved); round 2: 2 of 2 accepted,
    one at the frontier; the Coder's prompts from the Proposer 40 % in round 2."""
    from experiments.kernelbench import selfplay
    from kzcore.proposer.gates import GATE_ORDER, GateResult
    from kzcore.proposer.pool import PassRate, TaskRecord, append_records

    ok = {g: GateResult(True) for g in GATE_ORDER}
    bad = {GATE_ORDER[0]: GateResult(False, "missing a requested API")}

    def record(i, rnd, gates, passed=None, apis=("Exp",)):
        rates = (PassRate(rnd, 4, passed),) if passed is not None else ()
        return TaskRecord(id=f"m{i}", apis=apis, level=1, code="x", gates=gates, pass_rates=rates,
                          provenance={"round": rnd}, dedup_key=f"k{i}")  # fmt: skip

    run = tmp_path / "run"
    run.mkdir()
    append_records(run / "pool.jsonl", [
        record(1, 1, ok, 2), record(2, 1, ok, 0, apis=("Sum",)), record(3, 1, bad), record(4, 1, bad),
        record(5, 2, ok, 1), record(6, 2, ok, 4),
    ])  # fmt: skip
    metrics = {"01-coder": {"proposer_task_share": 0.0}, "02-coder": {"proposer_task_share": 0.4},
               "01-proposer": {"top_template_share": 0.5}}  # fmt: skip
    (run / "state.json").write_text(json.dumps({"done": list(metrics), "metrics": metrics}))
    samples = run / "phases" / "02-coder" / "model" / "samples.jsonl"  # round 2's Coder completions; none of round 1
    samples.parent.mkdir(parents=True)
    kept = [("2/proposed_m5", "compile_error"), ("2/proposed_m5", "compile_error"), ("2/proposed_m6", "correct"),
            ("1/1_ReLU", "correct")]  # fmt: skip
    samples.write_text("".join(json.dumps({"task": t, "status": s}) + "\n" for t, s in kept))
    rows = selfplay.rounds(run)
    assert [(r["round"], r["proposed"], r["accepted"]) for r in rows] == [(1, 4, 2), (2, 2, 2)]
    assert rows[0]["proposer_task_statuses"] is None  # no samples kept for round 1
    assert rows[1]["proposer_task_statuses"] == {"compile_error": 2, "correct": 1}  # the built-in task not counted
    assert "| compile_error 2, correct 1 |" in "\n".join(selfplay.markdown({"m": rows}))
    # an rft round keeps no GRPO samples: its verified samples say the same
    rft = run / "phases" / "01-coder" / "rft"
    rft.mkdir(parents=True)
    verified = [{"type": "run"}, {"type": "result", "problem": "proposed_m1", "status": "incorrect"},
                {"type": "result", "problem": "fam_abs", "status": "correct"}]  # fmt: skip
    (rft / "x2-results-cuda.jsonl").write_text("".join(json.dumps(r) + "\n" for r in verified))
    assert selfplay.rounds(run)[0]["proposer_task_statuses"] == {"incorrect": 1}
    assert rows[0]["acceptance"] == 0.5 and rows[0]["api_sets"] == 2 and rows[0]["frontier_share"] == 0.5
    assert rows[0]["first_failed_gate"] == {GATE_ORDER[0]: 2} and rows[0]["top_template_share"] == 0.5
    assert rows[1]["frontier_share"] == 0.5 and rows[1]["proposer_task_share"] == 0.4
    assert selfplay.targets(rows) == {"acceptance": True, "frontier_share": True, "proposer_task_share": True}
    falling = [dict(rows[0], acceptance=0.6), dict(rows[1], acceptance=0.4)]
    assert selfplay.targets(falling)["acceptance"] is False  # above 30 % but falling
    assert selfplay.targets([]) == {"acceptance": None, "frontier_share": None, "proposer_task_share": None}


def test_how_far_the_samples_got(tmp_path):
    """Beside pass@k, the share of samples that parsed, compiled and ran, per problem then averaged (where every
    arm scores 0, these still tell the arms apart), and their paired difference from the SFT model."""
    from experiments.kernelbench.report import main

    sft = {"1_A": 0}
    write_run(tmp_path / "grpo", {}, sft)
    ladders = {  # per problem: the statuses of its 4 samples, at the final phase
        "1_A": ["format_error", "compile_error", "runtime_error", "incorrect"],
        "2_B": ["static_check_failed", "timeout", "hack_suspected", "correct"],
        "3_C": ["format_error"] * 4,
    }
    writer = ResultsWriter(tmp_path / "grpo" / "heldout" / "02-coder" / "results-cuda.jsonl")
    for name, statuses in ladders.items():
        for s, status in enumerate(statuses):
            writer.write(EvalResult(problem=name, language="cuda", level=2 if name == "3_C" else 1, sample=s,
                                    status=Status(status)))  # fmt: skip
    writer.close()
    out = tmp_path / "report" / "kb"
    assert main([f"ca-grpo-s0={tmp_path / 'grpo'}", "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    row = {(r["phase"], r["level"]): r for r in report["rows"]}[("02-coder", "all")]
    # 1_A: 3, 2, 1 of 4 parsed, compiled, ran; 2_B: 4, 3, 2; 3_C: none
    assert row["parsed"]["mean"] == pytest.approx((0.75 + 1.0 + 0) / 3)
    assert row["compiled"]["mean"] == pytest.approx((0.5 + 0.75 + 0) / 3)
    assert row["ran"]["mean"] == pytest.approx((0.25 + 0.5 + 0) / 3)
    assert row["pass@1"]["mean"] == pytest.approx(0.25 / 3)
    compiled = [c for c in report["comparisons"] if "seed" in c and c["metric"] == "compiled"]
    # the SFT model's samples are all `incorrect`: every one compiled
    assert [(c["vs"], round(c["mean"], 6)) for c in compiled] == [("SFT", round(1.25 / 3 - 1, 6))]
    assert "## How far the samples got" in out.with_suffix(".md").read_text()


def test_completion_lengths_per_model_from_the_completions_beside_the_results(tmp_path):
    """How often a model's completions run into the token limit, and how long they are, from the completions
    file of each scored phase (gzipped as committed records are): per problem, then averaged over the kept ones."""
    import gzip

    from experiments.kernelbench.report import main

    write_run(tmp_path / "grpo", {"1_A": 1}, {})
    lengths = {"1_A": [("length", 1536)] * 3 + [("stop", 400)], "2_B": [("stop", 200)] * 4,
               "3_C": [("length", 1536)] * 4, "4_D": [("length", 1536)] * 4}  # 4_D: flagged, not averaged  # fmt: skip
    lines = [json.dumps({"problem": name, "level": 2 if name in ("3_C", "4_D") else 1, "sample": i,
                         "completion": "...", "finish_reason": why, "tokens": tokens})
             for name, samples in lengths.items() for i, (why, tokens) in enumerate(samples)]  # fmt: skip
    with gzip.open(tmp_path / "grpo" / "heldout" / "02-coder" / "completions-cuda.jsonl.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    out = tmp_path / "report" / "kb"
    assert main([f"ca-grpo-s0={tmp_path / 'grpo'}", "--out", str(out)]) == 0
    rows = {(r["phase"], r["level"]): r for r in json.loads(out.with_suffix(".json").read_text())["rows"]}
    final = rows[("02-coder", "all")]
    assert final["at_limit"]["mean"] == pytest.approx((0.75 + 0 + 1) / 3)
    assert final["tokens"]["mean"] == pytest.approx(((3 * 1536 + 400) / 4 + 200 + 1536) / 3)
    assert rows[("02-coder", 1)]["at_limit"]["mean"] == pytest.approx(0.75 / 2)
    assert "at_limit" not in rows[("00-sft", "all")]  # no completions recorded for that phase: no figure, not 0
    md = out.with_suffix(".md").read_text()
    assert "## Completion lengths" in md and "| ca-grpo-s0 | 02-coder | cuda | 0.583 [" in md


def test_records_stored_from_an_archive_leave_out_what_a_fork_shares(tmp_path):
    """experiments/kernelbench/records.py stores a GPU session's archive: a fork's files that are its origin's
    byte for byte are left out, large JSONL is gzipped, and the report reads the stored runs as it reads the
    runs themselves."""
    import tarfile

    from experiments.kernelbench import records
    from experiments.kernelbench.report import main

    sft = {"1_A": 2, "2_B": 4}
    tree = tmp_path / "tree"
    write_run(tree / "runs" / "kb-seed0", {"1_A": 4, "3_C": 2}, sft)
    write_run(tree / "runs" / "kb-seed0-sft", {"1_A": 3}, sft)
    (tree / "runs" / "kb-seed0-sft" / "state.json").write_text(json.dumps({"forked_from": "runs/kb-seed0"}))
    big = tree / "runs" / "kb-seed0" / "heldout" / "00-sft" / "completions-cuda.jsonl"
    big.write_text("".join(json.dumps({"problem": "1_A", "level": 1, "sample": i, "completion": "x" * 100,
                                       "finish_reason": "stop", "tokens": 30}) + "\n" for i in range(500)))  # fmt: skip
    archive = tmp_path / "learn.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree / "runs", arcname="runs")
    dest = tmp_path / "results" / "2026-01-01-gpu"
    assert records.main([str(archive), str(dest)]) == 0
    fork, main_run = dest / "runs" / "kb-seed0-sft", dest / "runs" / "kb-seed0"
    assert not (fork / "heldout-problems.json").exists() and not (fork / "heldout" / "00-sft").exists()
    assert (fork / "heldout" / "02-coder" / "results-cuda.jsonl").exists()  # its own
    assert (main_run / "heldout" / "00-sft" / "completions-cuda.jsonl.gz").exists() and not big.with_name("x").exists()
    assert records.located(fork, "heldout/00-sft/completions-cuda.jsonl").name == "completions-cuda.jsonl.gz"
    reports = []
    for runs in (tree / "runs", dest / "runs"):
        out = tmp_path / f"report-{runs.parent.name}" / "kb"
        assert main([f"ca-grpo-s0={runs / 'kb-seed0'}", f"sft-s0={runs / 'kb-seed0-sft'}", "--out", str(out)]) == 0
        report = json.loads(out.with_suffix(".json").read_text())
        reports.append((report["rows"], report["comparisons"]))
    assert reports[0] == reports[1]
    assert records.main([str(tmp_path / "missing.tar.gz"), str(dest)]) == 1


def test_a_run_cut_off_before_its_final_evaluation_is_compared_with_nothing(tmp_path):
    """A run that ended after 02-proposer has only its SFT model scored: comparing that with another arm's final
    model would credit the other arm with training it never had, so the run takes part in no difference."""
    from experiments.kernelbench.report import main

    sft = {"1_A": 2}
    write_run(tmp_path / "grpo", {"1_A": 4}, sft)
    write_run(tmp_path / "rft", {"1_A": 3}, sft)
    rft = tmp_path / "rft"
    rows = [json.loads(line) for line in (rft / "heldout.jsonl").read_text().splitlines()]
    (rft / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["phase"] != "02-coder"))
    done = ["00-distill", "00-sft", "01-proposer", "01-coder", "02-proposer"]
    (rft / "state.json").write_text(json.dumps({"done": done, "metrics": {}}))
    out = tmp_path / "report" / "kb"
    assert main([f"ca-grpo-s0={tmp_path / 'grpo'}", f"rft-s0={rft}", "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["unscored_end"] == {"rft-s0": "02-proposer"}
    pairs = {(c["arm"], c["vs"]) for c in report["comparisons"] if "seed" in c}
    assert pairs == {("ca-grpo", "SFT")}
    assert {r["phase"] for r in report["rows"] if r["model"] == "rft-s0"} == {"00-sft"}
    assert "rft-s0: its final model was never scored" in out.with_suffix(".md").read_text()


def test_a_fork_whose_run_did_not_score_its_sft_model_is_compared_with_the_other_arms_only(tmp_path):
    """A forks-only session with the main job's ``[heldout] phases = "last"`` leaves the fork no SFT score: the
    fork is compared with the other arms of its seed, and the report says why it has no "vs SFT" row."""
    import shutil

    from experiments.kernelbench.report import main

    sft = {"1_A": 2}
    write_run(tmp_path / "grpo", {"1_A": 4}, sft)
    write_run(tmp_path / "rft", {"1_A": 3}, sft)
    rft = tmp_path / "rft"
    shutil.rmtree(rft / "heldout" / "00-sft")
    rows = [json.loads(line) for line in (rft / "heldout.jsonl").read_text().splitlines()]
    (rft / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["phase"] != "00-sft"))
    out = tmp_path / "report" / "kb"
    assert main([f"ca-grpo-s0={tmp_path / 'grpo'}", f"rft-s0={rft}", "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["sft_unscored"] == ["rft-s0"]
    pairs = {(c["arm"], c["vs"]) for c in report["comparisons"] if "seed" in c}
    assert pairs == {("ca-grpo", "SFT"), ("ca-grpo", "rft")}
    assert "rft-s0: its run did not score its own SFT model" in out.with_suffix(".md").read_text()


def test_every_model_is_scored_on_the_problems_every_run_kept(tmp_path):
    """Runs of different sessions check the problems afresh: a problem one run kept and another flagged counts
    for neither model, so the rows compare like with like."""
    from experiments.kernelbench.report import main

    sft = {"1_A": 2, "2_B": 4}
    write_run(tmp_path / "grpo", {"1_A": 4, "2_B": 4, "3_C": 2}, sft)
    write_run(tmp_path / "ctl", {"1_A": 2, "2_B": 4}, sft, flagged=("kernelbench:level2/4_D", "kernelbench:level2/3_C"))
    out = tmp_path / "report" / "kb"
    assert main([f"ca-grpo-s0={tmp_path / 'grpo'}", f"sft-s0={tmp_path / 'ctl'}", "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["problems"] == {"kept_by_every_run": 2, "clean": 1}
    final = {(r["model"], r["phase"], r["level"]): r for r in report["rows"]}
    row = final[("ca-grpo-s0", "02-coder", "all")]
    assert row["pass@1"]["problems"] == 2 and row["pass@1"]["mean"] == pytest.approx(1.0)  # 1_A, 2_B only
    assert ("ca-grpo-s0", "02-coder", 2) not in final  # no level-2 problem kept by both
