"""CA-GRPO: pinned rewards for hand-made groups below and above tau, hacks paid below incorrect, tau > 1
turns speed off, and rewards computed by 2 processes that each hold half of every group equal the
single-process ones."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kzcore.train.ca_grpo import CAGRPOConfig, Verdict, ca_grpo_rewards, group_rewards

ROOT = Path(__file__).resolve().parent.parent
C, W, H = "correct", "incorrect", "hack_suspected"


def group(*items, gid="g"):
    return [Verdict(gid, s, sp) for s, sp in items]


def test_below_tau_only_correctness_pays():
    g = group((C, 4.0), (W, None), (W, None), (H, None), (C, 0.5))  # rho = 0.4 < 0.5
    rewards, rho, speed_on = group_rewards(g, CAGRPOConfig())
    assert rho == pytest.approx(0.4) and not speed_on
    assert rewards == [1.0, 0.0, 0.0, -0.5, 1.0]


def test_at_tau_log_speed_term_switches_on():
    g = group((C, 4.0), (C, 0.5), (C, math.sqrt(2)), (W, None), ("compile_error", None), (C, None))  # rho = 4/6
    rewards, rho, speed_on = group_rewards(g, CAGRPOConfig(tau=0.5, speed="log", speed_weight=1.0))
    assert speed_on
    assert rewards == pytest.approx([2.0, 0.0, 1.5, 0.0, 0.0, 1.0])  # log2 clipped to [-1, 1]; untimed: 0


def test_exactly_tau_counts_as_reached():
    rewards, rho, speed_on = group_rewards(group((C, 2.0), (W, None)), CAGRPOConfig(tau=0.5))
    assert rho == 0.5 and speed_on and rewards == [2.0, 0.0]


def test_rank_speed_term():
    g = group((C, 1.2), (C, 3.0), (C, 1.2), (C, 0.9), (W, None))
    rewards, _, _ = group_rewards(g, CAGRPOConfig(speed="rank", speed_weight=0.5))
    assert rewards == pytest.approx([1.25, 1.5, 1.25, 1.0, 0.0])


def test_hack_is_paid_below_incorrect_and_tau_above_one_disables_speed():
    g = group((C, 8.0), (C, 8.0), (H, 100.0), (W, None))
    on, _, _ = group_rewards(g, CAGRPOConfig())
    off, _, speed_on = group_rewards(g, CAGRPOConfig(tau=1.1))
    assert on == [2.0, 2.0, -0.5, 0.0]
    assert not speed_on and off == [1.0, 1.0, -0.5, 0.0]
    assert min(on) < 0.0 == on[3]


def test_groups_are_found_by_id_in_any_order():
    a = group((C, 2.0), (C, 2.0), gid="a")
    b = group((C, 2.0), (W, None), (W, None), gid="b")
    mixed = [b[0], a[0], b[1], a[1], b[2]]
    assert ca_grpo_rewards(mixed) == [1.0, 2.0, 0.0, 2.0, 0.0]


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_two_processes_equal_single_process(tmp_path):
    rows = []
    for gid, items in {
        "p1": [(C, 1.5), (C, 3.0), (W, None), (C, 0.7), (H, 50.0)],  # rho 0.6: speed on
        "p2": [(C, 2.0), (W, None), (W, None), ("timeout", None), (C, 4.0)],  # rho 0.4: off
        "p3": [(C, 1.1), (C, 1.1), (C, 2.2), (C, 0.9), (C, 5.0)],
    }.items():
        rows += [{"group": gid, "status": s, "speedup": sp} for s, sp in items]
    data = tmp_path / "rows.json"
    data.write_text(json.dumps(rows))
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.fakes_dist", str(r), "2", port, str(data), str(tmp_path / f"r{r}.json")],
            cwd=ROOT,
        )
        for r in range(2)
    ]
    for p in procs:
        assert p.wait(120) == 0
    per_rank = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(2)]
    distributed = [None] * len(rows)
    for r in range(2):
        for j, i in enumerate(range(r, len(rows), 2)):
            distributed[i] = per_rank[r][j]
    single = ca_grpo_rewards([Verdict(**x) for x in rows], CAGRPOConfig(tau=0.5, speed="rank"))
    assert distributed == pytest.approx(single)
    # and a rank alone (no gathering) would have been wrong: p2 split 3/2 looks like rho 1/3 and 1/2
    assert ca_grpo_rewards([Verdict(**x) for x in rows[1::2]], CAGRPOConfig(tau=0.5, speed="rank")) != per_rank[1]
