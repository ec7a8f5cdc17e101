"""scripts/gpu-train's launcher (the part that runs in the background on the GPU machine), with a stand-in python
whose `-m kzcore.cli train` finishes a run's phases at once: the main job stops after SFT, each KZ_FORKS config
is forked from its cold start and trained, then the main job resumes. No GPU, no training."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FAKE_TRAIN = r"""
import json, os, sys, time
from pathlib import Path
from kzcore.train.config import load_config

args = sys.argv[1:]
config = load_config(args[args.index("--config") + 1])
until = args[args.index("--until") + 1] if "--until" in args else None
run = Path(config.run.dir)
state_path = run / "state.json"
state = json.loads(state_path.read_text()) if state_path.exists() else {"done": [], "metrics": {}}
if "00-distill" not in state["done"]:  # a real run loads its model and distils for a while first
    time.sleep(float(os.environ.get("KZ_TEST_DISTILL_S", "0")))
state["heldout_phases"] = config.heldout.phases
for phase in ("00-distill", "00-sft", "01-coder"):
    if phase not in state["done"]:
        (run / "phases" / phase / "model").mkdir(parents=True, exist_ok=True)
        state["done"].append(phase)
        state["metrics"][phase] = {"method": config.coder.method}
    if phase == until:
        break
state_path.parent.mkdir(parents=True, exist_ok=True)
state_path.write_text(json.dumps(state))
"""

STAND_IN = """#!/usr/bin/env bash
echo "$*" >> "$KZ_TEST_CALLS"
if [ "$1" = "-m" ] && [ "$2" = "kzcore.cli" ] && [ "$3" = "train" ]; then
  shift 3
  exec "$KZ_TEST_PY" "$KZ_TEST_FAKE" "$@"
fi
exec "$KZ_TEST_PY" "$@"
"""


CONFIGS = "experiments/kernelbench/configs"


def launch(tmp_path, **env_vars) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """scripts/gpu-train launch in a copy of the tree, with the stand-in python: (process, tree, KZM folder)."""
    tree = tmp_path / "tree"
    for sub in ("scripts", "configs", "experiments"):
        shutil.copytree(ROOT / sub, tree / sub, ignore=shutil.ignore_patterns("results", "__pycache__"))
    (tmp_path / "fake_train.py").write_text(FAKE_TRAIN)
    python = tmp_path / "python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    kzm = tmp_path / "kzm"
    kzm.mkdir()
    configs = CONFIGS
    env = {
        **os.environ,
        "PYTHON": str(python), "KZM": str(kzm), "KZ_TEST_CALLS": str(tmp_path / "calls"),
        "KZ_TEST_PY": sys.executable, "KZ_TEST_FAKE": str(tmp_path / "fake_train.py"),
        "KZ_MAIN": f"{configs}/kb-seed0.toml", "KZ_SEEDS": "",
        "KZ_FORKS": f"{configs}/kb-seed0-sft.toml {configs}/kb-seed0-rft.toml",
        "PYTHONPATH": str(ROOT), **env_vars,
    }  # fmt: skip
    proc = subprocess.run(
        ["bash", "scripts/gpu-train", "launch"], cwd=tree, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, tree, kzm


def test_launch_forks_each_control_after_the_main_jobs_sft_and_resumes_the_main_job(tmp_path, timeout_wait):
    # timeout_wait: the launcher polls the main job's state every 5 s, by design
    proc, tree, kzm = launch(tmp_path, KZ_TEST_DISTILL_S="6")  # polled while it distils
    configs = CONFIGS
    assert "all runs ended" in proc.stdout
    exits = [line for line in (kzm / "exits.log").read_text().split("\n") if line]
    names = [line.split()[0] for line in exits]
    # the main job until SFT ends first; then the forks and the resumed main job run side by side
    assert names[0] == "main" and sorted(names[1:]) == ["kb-seed0-rft", "kb-seed0-sft", "main"]
    assert all(" exit 0 " in line for line in exits)
    trains = [line for line in (tmp_path / "calls").read_text().splitlines() if line.startswith("-m kzcore.cli train")]
    started = [line.split("--config ")[1] for line in trains]
    assert started[0] == f"{configs}/kb-seed0.toml --until 00-sft"  # the rest start in the background, any order
    assert sorted(started[1:]) == [f"{configs}/{c}.toml" for c in ("kb-seed0-rft", "kb-seed0-sft", "kb-seed0")]
    for arm, method in (("kb-seed0", "ca-grpo"), ("kb-seed0-sft", "sft"), ("kb-seed0-rft", "rft")):
        state = json.loads((tree / "runs" / arm / "state.json").read_text())
        assert state["done"] == ["00-distill", "00-sft", "01-coder"]
        assert state["metrics"]["01-coder"]["method"] == method
    forked = json.loads((tree / "runs" / "kb-seed0-sft" / "state.json").read_text())
    assert forked["forked_from"] == "runs/kb-seed0"
    calls = (tmp_path / "calls").read_text()
    assert "--until 00-sft" in calls and "gpu-small" not in calls  # no seed fork of the default experiment


def test_a_session_of_forks_only_stops_the_main_job_after_sft(tmp_path, timeout_wait):
    """KZ_MAIN_UNTIL=00-sft: the seed's cold start again, the named forks from it, and the main job not resumed
    (its CA-GRPO arm ran in an earlier session)."""
    forks = f"{CONFIGS}/kb-seed0-sft.toml"
    proc, tree, kzm = launch(tmp_path, KZ_FORKS=forks, KZ_MAIN_UNTIL="00-sft")
    names = [line.split()[0] for line in (kzm / "exits.log").read_text().split("\n") if line]
    assert names == ["main", "kb-seed0-sft"]
    assert json.loads((tree / "runs" / "kb-seed0" / "state.json").read_text())["done"] == ["00-distill", "00-sft"]
    assert json.loads((tree / "runs" / "kb-seed0-sft" / "state.json").read_text())["done"][-1] == "01-coder"


def test_a_session_that_skips_the_sft_score_waits_for_its_main_job_by_the_config_it_launched(tmp_path, timeout_wait):
    """KZ_MAIN_HELDOUT=last: the main job runs from a session config that extends the seed's; the launcher, which
    polls that job while it distils, must find it by that config, or it gives up before forking anything."""
    forks = f"{CONFIGS}/kb-seed0-rft.toml"
    proc, tree, kzm = launch(
        tmp_path, KZ_FORKS=forks, KZ_MAIN_UNTIL="00-sft", KZ_MAIN_HELDOUT="last", KZ_TEST_DISTILL_S="8"
    )
    names = [line.split()[0] for line in (kzm / "exits.log").read_text().split("\n") if line]
    assert names == ["main", "kb-seed0-rft"]
    trains = [line for line in (tmp_path / "calls").read_text().splitlines() if line.startswith("-m kzcore.cli train")]
    assert trains[0].endswith(f"--config {CONFIGS}/.session-kb-seed0.toml --until 00-sft")
    main = json.loads((tree / "runs" / "kb-seed0" / "state.json").read_text())
    assert main["heldout_phases"] == "last" and main["done"] == ["00-distill", "00-sft"]
    fork = json.loads((tree / "runs" / "kb-seed0-rft" / "state.json").read_text())
    assert fork["done"][-1] == "01-coder" and fork["heldout_phases"] == "ends"  # the fork keeps its own config


def test_a_main_job_without_forks_can_skip_the_sft_score_too(tmp_path, timeout_wait):
    """KZ_MAIN_HELDOUT=last with no fork (a seed's CA-GRPO arm alone): the main job runs every phase from the session
    config, so its SFT model is not scored on the held-out problems."""
    proc, tree, kzm = launch(tmp_path, KZ_FORKS="", KZ_MAIN_HELDOUT="last")
    names = [line.split()[0] for line in (kzm / "exits.log").read_text().split("\n") if line]
    assert names == ["main"]
    trains = [line for line in (tmp_path / "calls").read_text().splitlines() if line.startswith("-m kzcore.cli train")]
    assert len(trains) == 1 and trains[0].endswith(f"--config {CONFIGS}/.session-kb-seed0.toml")
    main = json.loads((tree / "runs" / "kb-seed0" / "state.json").read_text())
    assert main["heldout_phases"] == "last" and main["done"] == ["00-distill", "00-sft", "01-coder"]
    assert main["metrics"]["01-coder"]["method"] == "ca-grpo"


def wait_call(tmp_path, launcher_alive_s: float | None) -> tuple[subprocess.CompletedProcess, float]:
    """scripts/gpu-train wait (KZ_WAIT_S 40) with no training process: the launcher's pid file names a process
    alive for `launcher_alive_s` seconds, or a process already ended (None). Returns (process, seconds)."""
    kzm, out, tree = tmp_path / "kzm", tmp_path / "out", tmp_path / "run-tree"
    for d in (kzm, out, tree / "runs"):
        d.mkdir(parents=True)
    if launcher_alive_s is None:  # a launcher that has ended (and been reaped)
        ended = subprocess.Popen(["true"])
        ended.wait()
        pid = ended.pid
    else:  # detached, as the real launcher is (setsid nohup): reaped by init when it ends, not left a zombie
        pid = int(subprocess.run(["bash", "-c", f"sleep {launcher_alive_s} > /dev/null 2>&1 & echo $!"],
                                 capture_output=True, text=True, check=True).stdout)  # fmt: skip
    (kzm / "launcher.pid").write_text(f"{pid}\n")
    env = {**os.environ, "KZM": str(kzm), "OUT": str(out), "KZ_RUN_TREE": str(tree), "KZ_WAIT_S": "40",
           "KZ_MAIN": f"{CONFIGS}/kb-seed0.toml", "KZ_SEEDS": "", "KZ_FORKS": "", "PYTHON": sys.executable}  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(["bash", "scripts/gpu-train", "wait"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    return proc, time.monotonic() - t0


def test_wait_waits_for_the_launcher_between_the_main_jobs_exit_and_a_forks_start(tmp_path, timeout_wait):
    """After the main job's SFT no training process lives while fork_run.py copies the cold start; a wait that
    looked only for training processes returned then, and the session lost a call's worth of device time."""
    proc, seconds = wait_call(tmp_path, launcher_alive_s=12)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 12 <= seconds < 40  # polled every 10 s: it ends on the first poll after the launcher's exit
    assert (tmp_path / "out" / "learn.tar.gz").exists()  # and packs, as every wait does


def test_wait_ends_at_once_when_the_launcher_has_ended(tmp_path):
    proc, seconds = wait_call(tmp_path, launcher_alive_s=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert seconds < 10 and (tmp_path / "out" / "learn.tar.gz").exists()
