"""bench.eos_commit_paths' pure parts: the window order and the summary of the commit cycles."""

import pytest

from bench.eos_commit_paths import main, producer_settings, summary, window_order


def test_each_round_measures_every_path_and_odd_rounds_reverse_the_order():
    assert window_order(["group", "record"], 3) == ["group", "record", "record", "group", "group", "record"]
    assert window_order(["a", "b", "c"], 2) == ["a", "b", "c", "c", "b", "a"]


def test_the_summary_is_of_the_whole_commit_path_and_of_each_part_in_ms():
    cycles = [(0.001, 0.002)] * 98 + [(0.050, 0.010), (0.100, 0.020)]
    assert summary(cycles) == {"cycles": 100, "p50_ms": 3.0, "p90_ms": 3.0, "p99_ms": 120.0, "max_ms": 120.0,
                               "position_p99_ms": 100.0, "commit_p99_ms": 20.0}


def test_an_unknown_path_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--destination", "127.0.0.1:1", "--paths", "group,offsets"])
    assert exited.value.code == 2
    assert "unknown path(s) offsets; known: group, group-per-partition, record" in capsys.readouterr().err


def test_a_producer_setting_without_a_value_is_refused(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--destination", "127.0.0.1:1", "--producer", "compression.type"])
    assert exited.value.code == 2
    assert "--producer takes KEY=VALUE, got 'compression.type'" in capsys.readouterr().err


def test_producer_settings_take_true_and_false_as_bools():
    assert producer_settings(["delivery.report.only.error=true", "linger.ms=5", "a=b=c"]) == {
        "delivery.report.only.error": True, "linger.ms": "5", "a": "b=c"}


def test_without_a_destination_or_a_running_stack_it_says_what_to_do(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DEVSTACK_ROOT", str(tmp_path / "no-stack"))
    with pytest.raises(SystemExit) as exited:
        main([])
    assert exited.value.code == 2
    assert "no --destination and no stack running: make stack-up, or name the brokers" in capsys.readouterr().err
