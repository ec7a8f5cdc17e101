"""experiments/proposer_examples: both arms (the suite's examples, per-api examples) end to end on a tiny model on
the CPU -- cold-start rows, the Proposer's SFT, proposals through the gates, per-arm summaries with intervals -- and
a second call resumes from the summaries instead of training again."""

from __future__ import annotations

import json

import pytest

from experiments.proposer_examples import run as experiment
from tests.tinymodel import build_tiny_checkpoint


def test_wilson_interval():
    assert experiment.wilson(0, 0) == (0.0, 1.0)
    lo, hi = experiment.wilson(16, 64)
    assert lo == pytest.approx(0.16, abs=0.01) and hi == pytest.approx(0.37, abs=0.01)
    assert experiment.wilson(0, 64)[0] == 0.0 and experiment.wilson(64, 64)[1] == 1.0


def test_the_arms_are_compared_per_seed_with_a_t_interval_over_seeds():
    def run(arm, seed, accepted):
        return {"arm": arm, "seed": seed, "acceptance": accepted / 64}

    runs = [run("suite", 0, 31), run("per-api", 0, 37), run("suite", 1, 26), run("per-api", 1, 37),
            run("suite", 2, 36), run("per-api", 2, 44), run("per-api", 3, 50)]  # fmt: skip
    d = experiment.paired_difference(runs)
    assert d["seeds"] == [0, 1, 2]  # seed 3 ran one arm only: no pair
    assert d["per_seed"] == [0.0938, 0.1719, 0.125] and d["mean"] == pytest.approx(0.1302, abs=1e-4)
    lo, hi = d["ci95_t"]  # sd 0.0393 over 3 seeds, t(2) = 4.303
    assert lo == pytest.approx(0.0326, abs=1e-3) and hi == pytest.approx(0.2278, abs=1e-3)
    assert experiment.paired_difference(runs[:2])["ci95_t"] is None  # one seed: no interval
    assert experiment.paired_difference([run("suite", 0, 3)]) is None


def test_both_arms_on_a_tiny_model_and_a_resume(tmp_path, monkeypatch, plugins, one_torch_thread, training):
    pytest.importorskip("trl")
    plugins("kz_models")
    from kzcore.proposer.catalog import load_catalog
    from kzcore.proposer.composer import compose

    def small(out):  # the composer's modules for two APIs: the whole catalog takes minutes on this CPU
        path = out / "composed.jsonl"
        if not path.exists():
            compose(load_catalog(), apis=["ReLU", "Conv2d"]).write(path)
        return path

    monkeypatch.setattr(experiment, "composed", small)
    tiny = build_tiny_checkpoint(tmp_path / "tiny")
    argv = [
        "--out",
        str(tmp_path / "out"),
        "--n",
        "3",
        "--steps",
        "1",
        "--batch-size",
        "3",
        "--device",
        "cpu",
        "--workers",
        "1",
    ]
    assert experiment.main([*argv, "--base", str(tiny)]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert set(summary["arms"]) == {"suite", "per-api"}
    assert summary["difference"]["seeds"] == [0] and summary["difference"]["ci95_t"] is None
    for name, arm in summary["arms"].items():
        assert arm["proposed"] == 3 and arm["seeds"] == [0] and 0 <= arm["accepted"] <= 3
        run = json.loads((tmp_path / "out" / f"{name}-s0" / "summary.json").read_text())
        assert run["sft_rows"] == 6 and sum(run["failures"].values()) + run["accepted"] == 3
        assert len((tmp_path / "out" / f"{name}-s0" / "pool.jsonl").read_text().splitlines()) == 3
    rows = {
        name: [json.loads(x) for x in (tmp_path / "out" / f"{name}-s0" / "proposer-sft.jsonl").read_text().splitlines()]
        for name in ("suite", "per-api")
    }
    # the arms' rows differ only in their prompts' examples
    assert [r["completion"] for r in rows["suite"]] == [r["completion"] for r in rows["per-api"]]
    assert [r["prompt"] for r in rows["suite"]] != [r["prompt"] for r in rows["per-api"]]

    def no_training(*args, **kwargs):
        raise AssertionError("an arm with a summary ran again")

    monkeypatch.setattr(experiment, "arm", no_training)
    assert experiment.main([*argv, "--base", str(tiny)]) == 0  # resumed: every arm read back from its summary
