"""`make bench` runs bench.compare with its defaults: every default system must run without extra flags, and a
system that needs a flag is refused at once, in one line, before any broker starts (stop 56: the default systems
included worker-base, and `make bench` died with a traceback after setting up and preloading)."""

from __future__ import annotations

import pytest

from bench import compare, width


def test_the_default_systems_need_no_other_flag():
    args = compare.build_parser().parse_args([])
    assert "worker-base" not in args.systems.split(",")
    assert args.systems.split(",") == ["worker", "mm2", "bare", "worker-eos", "mm2-eos"]


@pytest.mark.parametrize("base", ["worker-base", "worker-base-eos"])
@pytest.mark.parametrize("bench", [compare, width])
def test_worker_base_without_a_base_tree_is_refused_before_anything_starts(bench, base, monkeypatch, capsys):
    def no_stack(*_a, **_k):
        raise AssertionError("a broker was started")

    monkeypatch.setattr(bench, "bench_stack", no_stack)
    with pytest.raises(SystemExit) as exited:
        bench.main(["--systems", f"{base},worker"])
    assert exited.value.code == 2
    assert "worker-base needs --base-tree" in capsys.readouterr().err
