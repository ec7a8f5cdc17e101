"""bench/host_speed.py: the host-speed figures recorded beside per-candidate latencies and throughput."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def host_speed(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent))
    from bench import host_speed

    return host_speed


def test_the_probe_times_the_static_check_and_python_work(host_speed):
    figures = host_speed.probe(repeats=3)
    assert "skipped" not in figures, figures
    assert figures["static_check_ms"] > 0 and figures["python_ms"] > 0
    assert figures["repeats"] == 3 and figures["cpus"] >= 1


def test_a_probe_without_the_triton_language_says_why_and_keeps_the_python_figure(host_speed):
    from kzcore.plugins import new_plugin_manager

    figures = host_speed.probe(repeats=1, pm=new_plugin_manager(load_entry_points=False))
    assert figures["python_ms"] > 0 and "static_check_ms" not in figures
    assert figures["skipped"].startswith("static_check_ms: ")


def test_the_bench_writes_its_report_and_refuses_zero_repeats(host_speed, tmp_path, capsys):
    out = tmp_path / "h.json"
    assert host_speed.main(["--repeats", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["bench"] == "host_speed" and report["static_check_ms"] > 0
    with pytest.raises(SystemExit) as exc:
        host_speed.main(["--repeats", "0"])
    assert exc.value.code == 2 and "--repeats must be at least 1" in capsys.readouterr().err
