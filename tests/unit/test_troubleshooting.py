"""docs/operations/troubleshooting.md against the code: every error line the page lists is printed by its command,
run here in this process through its entry point with the input the page names as the cause (no server: the
clusters are 127.0.0.1:1; the inputs: troubleshooting_cases*.py), and every case there is on the page. `…` on the
page stands for any text."""

from __future__ import annotations

import importlib

import pytest

from mirror_worker.config.placeholders import SECRETS_DIRS_VARIABLE
from mirror_worker.redaction import REDACTED
from tests.unit import (
    troubleshooting_cases_airflow,
    troubleshooting_cases_devstack,
    troubleshooting_cases_dr,
    troubleshooting_cases_eos,
    troubleshooting_cases_jobs,
    troubleshooting_cases_runtime,
    troubleshooting_cases_schemas,
    troubleshooting_cases_teststack,
    troubleshooting_cases_worker,
)
from tests.unit.troubleshooting_cases import CONSUMER, PRODUCER, SPEC, FakeCluster
from tests.unit.troubleshooting_sites import documented_exit_codes, pattern

PARTS = (troubleshooting_cases_worker.CASES, troubleshooting_cases_runtime.CASES, troubleshooting_cases_jobs.CASES,
         troubleshooting_cases_airflow.CASES, troubleshooting_cases_devstack.CASES,
         troubleshooting_cases_dr.CASES, troubleshooting_cases_eos.CASES,
         troubleshooting_cases_schemas.CASES, troubleshooting_cases_teststack.CASES)
CASES = {line: case for part in PARTS for line, case in part.items()}
assert len(CASES) == sum(map(len, PARTS)), "a line in two case modules"


def test_the_page_lists_exactly_the_cases_run_here_with_their_exit_codes():
    assert documented_exit_codes() == {line: str(exit_code) for line, (_, _, exit_code, _, _) in CASES.items()}


def run_command(command, argv: list[str], capsys) -> tuple[int | str, list[str]]:
    """The command's main (a module's) or a scene (a function) in this process: its exit code (a scene: the page's
    exit column) and the plain lines of its stderr (the clients' own JSON log lines may come first)."""
    main = command if callable(command) else importlib.import_module(command).main
    try:
        code = main(*argv) if callable(command) else main(argv)
    except SystemExit as exc:  # argparse's own exits (--help), should a case reach one
        code = exc.code
    printed = [text for text in capsys.readouterr().err.splitlines() if text and not text.startswith("{")]
    return code, printed


@pytest.mark.parametrize("line", sorted(CASES))
def test_the_command_prints_the_documented_line(line, tmp_path, capsys, monkeypatch):
    module, argv, exit_code, files, cluster = CASES[line]
    monkeypatch.chdir(tmp_path)
    if cluster is not False:
        fake = FakeCluster(cluster)
        monkeypatch.setattr("spark_jobs.common.kafka_meta.kafka_consumer", fake.consumer)
        monkeypatch.setattr("spark_jobs.common.kafka_meta.admin_client", fake.admin)
    monkeypatch.delenv("TROUBLESHOOTING_UNSET", raising=False)
    monkeypatch.delenv(SECRETS_DIRS_VARIABLE, raising=False)  # placeholders as on a host that names none
    written = {"c.properties": CONSUMER, "p.properties": PRODUCER, "spec.yaml": SPEC, **files}
    for name, text in written.items():
        (tmp_path / name).write_text(text.replace("{dir}", str(tmp_path)))
    code, printed = run_command(module, [arg.replace("{dir}", str(tmp_path)) for arg in argv], capsys)
    assert str(code) == str(exit_code), printed
    matched = [text for text in printed if pattern(line).match(text)]
    assert matched, f"{line!r} not in:\n" + "\n".join(printed)
    # `…` matches anything, [redacted] too: the line must read as the page gives it, not cut by the redaction
    # of `key: value` pairs (the page's inputs hold no secret where a line shows none).
    assert REDACTED in line or not any(REDACTED in text for text in matched), matched
