"""What a long `kz train` shows while it runs and after: each phase announced as it starts, progress lines
(or a bar on a terminal) while held-out problems are sampled and evaluated, and curves.png with phases by
name and the held-out verdict mix. The trainer's own files are read through kzcore.jsonl, so a torn last
line (a killed run) is skipped with a warning instead of crashing the resumed run."""

from __future__ import annotations

import json
from pathlib import Path

from kzcore.progress import Progress
from kzcore.train.curves import curves_figure, plot_curves
from kzcore.train.schedule import Schedule, run_schedule


def test_progress_lines_at_start_throttled_and_at_end(monkeypatch):
    from kzcore import progress

    clock = iter([0.0, 0.0, 1.0, 20.0, 21.0, 50.0, 50.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    lines: list[str] = []
    with Progress("held-out 00-sft [triton]: evaluating", None, lines.append, every_s=15, live=False) as bar:
        bar.start(4)
        for note in ("0 correct", "1 correct", "1 correct", "2 correct"):
            bar.advance(1, note)
    assert lines == [
        "held-out 00-sft [triton]: evaluating: 0/4",
        "held-out 00-sft [triton]: evaluating: 2/4 (20 s), 1 correct",  # 1 s after the start: no line
        "held-out 00-sft [triton]: evaluating: 4/4 in 50 s, 2 correct",
    ]


def test_each_phase_is_announced_as_it_starts(tmp_path):
    lines: list[str] = []
    handlers = dict.fromkeys(("distill", "sft", "proposer", "coder"), lambda ph, d: lines.append("ran") or {})
    run_schedule(Schedule(rounds=1, proposer_steps=2, coder_steps=3), handlers, tmp_path, log=lines.append)
    starts = [x for x in lines if "starting" in x]
    assert starts == [
        "phase 1/4 00-distill: starting (distill)", "phase 2/4 00-sft: starting (sft)",
        "phase 3/4 01-proposer: starting (proposer, 2 steps)", "phase 4/4 01-coder: starting (coder, 3 steps)",
    ]  # fmt: skip
    assert lines.index("phase 2/4 00-sft: starting (sft)") < lines.index(
        "ran", lines.index("phase 2/4 00-sft: starting (sft)")
    )


def _run_dir(tmp_path: Path, torn: bool = False) -> Path:
    state = {
        "done": ["00-distill", "00-sft", "01-coder"],
        "metrics": {"00-distill": {"kept": 3}, "00-sft": {"steps": 5}, "01-coder": {"reward_mean": 0.4, "correct_rate": 0.25}},
    }  # fmt: skip
    (tmp_path / "state.json").write_text(json.dumps(state))
    rows = [
        {"phase": "00-base", "heldout_pass@1": 0.0, "heldout_triton_statuses": {"format_error": 4}},
        {"phase": "00-sft", "heldout_pass@1": 0.0, "heldout_triton_statuses": {"compile_error": 3, "incorrect": 1}},
        {"phase": "01-coder", "heldout_pass@1": 0.25, "heldout_triton_statuses": {"correct": 1, "incorrect": 3}},
    ]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "heldout.jsonl").write_text(text + ('{"phase": "02-co' if torn else ""))
    return tmp_path


def test_curves_name_phases_and_stack_the_verdict_mix(tmp_path):
    import matplotlib.pyplot as plt

    fig = curves_figure(_run_dir(tmp_path))
    try:
        training, heldout, verdicts = fig.axes[:3]
        assert [t.get_text() for t in training.get_xticklabels()] == ["00-distill", "00-sft", "01-coder"]
        assert [t.get_text() for t in heldout.get_xticklabels()] == ["00-base", "00-sft", "01-coder"]
        assert [t.get_text() for t in verdicts.get_xticklabels()] == ["00-base", "00-sft", "01-coder"]
        # one bar series per verdict; each phase's bars add up to its 4 samples
        series = {c.get_label(): [p.get_height() for p in c.patches] for c in verdicts.containers}
        assert series == {
            "compile_error": [0, 3, 0], "correct": [0, 0, 1], "format_error": [4, 0, 0], "incorrect": [0, 1, 3],
        }  # fmt: skip
    finally:
        plt.close(fig)


def test_a_torn_heldout_line_is_skipped_with_a_warning(tmp_path, caplog):
    from kzcore.train.checkpoints import best_phase

    run = _run_dir(tmp_path, torn=True)
    with caplog.at_level("WARNING", logger="kzcore.jsonl"):
        assert plot_curves(run) == run / "curves.png"
    assert "torn last line skipped" in caplog.text
    assert best_phase(run) == "01-coder"
