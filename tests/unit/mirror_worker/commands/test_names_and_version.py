"""The command names itself as it was run (issue 44: `kafka-mirror --help` said `python -m mirror_worker`) and
tells its version."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

from devstack import paths
from mirror_worker.commands import base, main


def _help(monkeypatch, capsys, argv0: str, argv: tuple[str, ...] = ("--help",)) -> str:
    monkeypatch.setattr(sys, "argv", [argv0, *argv])
    with pytest.raises(SystemExit) as done:
        main.main(list(argv))
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("argv0, usage", [
    ("/opt/venv/bin/kafka-mirror", "usage: kafka-mirror "),
    (str(paths.ROOT / "mirror_worker" / "__main__.py"), "usage: python -m mirror_worker "),
])
def test_the_usage_line_names_the_command_as_run(monkeypatch, capsys, argv0, usage):
    assert _help(monkeypatch, capsys, argv0).startswith(usage)


def test_a_subcommand_through_the_main_script_is_named_after_it(monkeypatch, capsys):
    out = _help(monkeypatch, capsys, "/opt/venv/bin/kafka-mirror", argv=("sync-schemas", "--help"))
    assert out.startswith("usage: kafka-mirror sync-schemas ")


def test_a_subcommand_through_its_own_script_is_named_as_that_script(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/opt/venv/bin/kafka-mirror-sync-schemas", "--help"])
    with pytest.raises(SystemExit) as done:
        main.sync_schemas_main()
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: kafka-mirror-sync-schemas ")


def test_version_is_the_installed_distributions(monkeypatch, capsys):
    monkeypatch.setattr(importlib.metadata, "version", lambda name: {"kafka-mirror": "9.8.7"}[name])
    monkeypatch.setattr(sys, "argv", ["/opt/venv/bin/kafka-mirror", "--version"])
    with pytest.raises(SystemExit) as done:
        main.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == "kafka-mirror 9.8.7\n"


def test_version_in_a_checkout_that_is_not_installed_comes_from_its_pyproject(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    expected = next(line.split('"')[1] for line in (paths.ROOT / "pyproject.toml").read_text().splitlines()
                    if line.startswith("version = "))
    assert base.package_version() == f"{expected} (source checkout, not installed)"


def test_version_from_the_command_line_exits_0():
    done = subprocess.run([sys.executable, "-m", "mirror_worker", "--version"], cwd=paths.ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("kafka-mirror ") and done.stderr == ""
