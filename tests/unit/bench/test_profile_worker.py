"""bench.profile_worker launches the worker through bench.harness.launch: its flags must give every setting launch
reads. The defect: `--consumer-props` and `--producer-props` were added to launch for the other benches, and
`python -m bench.profile_worker` stopped with AttributeError: 'Namespace' object has no attribute 'consumer_props'
after preloading its records."""

from __future__ import annotations

import pytest

from bench import harness
from bench.profile_worker import build_parser


def test_launch_finds_every_setting_it_reads_in_the_profilers_flags(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(harness.subprocess, "Popen", lambda argv, **kwargs: started.append(argv))
    args = build_parser().parse_args(["--producer-props", "linger.ms=5"])
    harness.launch("worker", harness.Clusters("127.0.0.1:1", "127.0.0.1:2"), ["t"], "p1", tmp_path, args)
    [argv] = started
    assert argv[argv.index("--whitelist") + 1] == "t"
    assert (tmp_path / "p1-destination.properties").read_text().endswith("linger.ms=5\n")


@pytest.mark.parametrize("flag", ["--consumer-props", "--producer-props", "--worker-args"])
def test_each_client_setting_defaults_to_none_named(flag):
    assert getattr(build_parser().parse_args([]), flag[2:].replace("-", "_")) == ""
