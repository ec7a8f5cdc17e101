"""``--eval KEY=VALUE,...`` (bench/settings.py): the benches' EvalConfig overrides, read as each field's type and
validated by EvalConfig, with a one-line error for anything else."""

from __future__ import annotations

import pytest

from bench.settings import eval_overrides


def test_values_are_read_as_their_fields_types():
    assert eval_overrides("min_reps=24, timed_spots=0,flush_l2=off,settle_ms=12.5,size=small") == {
        "min_reps": 24, "timed_spots": 0, "flush_l2": False, "settle_ms": 12.5, "size": "small",
    }  # fmt: skip
    assert eval_overrides("") == {}


@pytest.mark.parametrize(
    "text, message",
    [("min_repz=3", "not KEY=VALUE with KEY an EvalConfig setting"), ("min_reps", "not KEY=VALUE"),
     ("min_reps=many", "min_reps='many' is not a int"), ("flush_l2=maybe", "flush_l2='maybe' is not a bool"),
     ("min_reps=0", "--eval: "), ("timed_check_share=2", "--eval: ")],
)  # fmt: skip
def test_anything_else_is_a_one_line_error(text, message):
    with pytest.raises(ValueError, match="^--eval: ") as info:
        eval_overrides(text)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_throughput_bench_refuses_a_bad_setting_in_one_line(capsys):
    from bench.throughput import main

    with pytest.raises(SystemExit) as info:
        main(["--eval", "min_repz=3", "--device", "cpu"])
    assert info.value.code == 2
    assert "--eval: 'min_repz=3' is not KEY=VALUE" in capsys.readouterr().err
