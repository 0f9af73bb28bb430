"""Lines printed while things run, not on bad input: the worker's (driven over the fakes of tests/unit/fakes.py) and
the DAG files' import errors in Airflow (the spec's `airflow:` section), each made by a scene for
test_troubleshooting.py. A scene prints what the user reads and returns the page's exit column."""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

from tests.unit.troubleshooting_cases import MIRROR, SOURCE, SPEC, case, with_mirror_keys

GOES_ON = "none: the worker goes on"
IMPORT_ERROR = "DAG import error"


def data_lost_before_mirrored() -> str:
    """The group committed offset 2 of t[0], whose records before 5 were deleted since: the partition halts."""
    from tests.unit.fakes import assign, make_worker, records

    worker, stream, _, _ = make_worker({("t", 0): records("t", 0, range(5, 8))}, low={("t", 0): 5},
                                       committed={("t", 0): (2, "id-t")})
    assign(worker, stream, ("t", 0))
    return GOES_ON


def stuck_shutdown() -> str:
    """A close that does not return within its bound (a cluster that stopped answering)."""
    from mirror_worker.commands.runner import close_within

    release, captured = threading.Event(), sys.stderr
    with tempfile.TemporaryFile("w+") as stderr:  # the stacks it dumps need a file with a descriptor
        sys.stderr = stderr
        try:
            close_within(lambda: release.wait(30), 0.1, "m")
        finally:
            sys.stderr = captured
            release.set()
        stderr.seek(0)
        captured.write(stderr.read())
    return "0, or the failure's code"


def dag_import(mirror: str = "orders", check_rendered_in: str | None = None) -> str:
    """Airflow imports the mirror's DAG file (or the spec's check file): the MirrorSpecError it raises is the import
    error Airflow lists (`airflow dags list-import-errors`, the UI's banner)."""
    from mirror_airflow.dag_factory import check_rendered, mirror_dags
    from mirror_airflow.exceptions import MirrorSpecError

    try:
        if check_rendered_in is not None:
            check_rendered(Path(check_rendered_in), Path("spec.yaml"))
        else:
            mirror_dags(mirror, Path("spec.yaml"))
    except MirrorSpecError as exc:
        print(exc, file=sys.stderr)
    return IMPORT_ERROR


def with_airflow(text: str) -> str:
    return with_mirror_keys(f"airflow: {text}")


CASES = {
    # the worker at run time
    "mirror_worker: data loss on source …: …; …": case(data_lost_before_mirrored, exit_code=GOES_ON),
    "mirror_worker: partition …[…] of source … halted at offset …: …": case(data_lost_before_mirrored,
                                                                          exit_code=GOES_ON),
    "mirror_worker: shutdown did not finish within …s (a cluster unreachable?): exiting without the final commit; "
    "what it held is mirrored again after a restart": case(stuck_shutdown, exit_code="0, or the failure's code"),
    # Airflow: DAG import errors
    "…: mirror …: airflow: a mapping is expected": case(dag_import, exit_code=IMPORT_ERROR,
                                                         spec_yaml=with_airflow("3")),
    "…: mirror …: airflow.…: unknown key": case(dag_import, exit_code=IMPORT_ERROR,
                                                 spec_yaml=with_airflow("{wokers: 2}")),
    "…: mirror …: airflow.failover-approvers: an approver is a user id, or a mapping with id (and name)": case(
        dag_import, exit_code=IMPORT_ERROR, spec_yaml=with_airflow("{failover-approvers: [{name: x}]}")),
    "…: mirror …: airflow.verify-schedule: a 5-field cron expression or @preset is expected, got …": case(
        dag_import, exit_code=IMPORT_ERROR, spec_yaml=with_airflow("{verify-schedule: '0 2 *'}")),
    "…: mirror …: airflow.source-conn-id: the mirror has several sources; a connection stands for one": case(
        dag_import, exit_code=IMPORT_ERROR, spec_yaml=SPEC.replace(
            f"    {SOURCE}\n", f"    sources: [{SOURCE[8:]}, {SOURCE[8:].replace('east', 'west')}]\n").replace(
            MIRROR, MIRROR + "        airflow: {source-conn-id: k}\n")),
    "…: mirror …: airflow.lag: stop-after-seconds must not exceed window-minutes (the rules see only the window)": case(
        dag_import, exit_code=IMPORT_ERROR,
        spec_yaml=with_airflow("{lag: {window-minutes: 1, stop-after-seconds: 120}}")),
    "…: no mirror named … any more: regenerate the DAG files (python -m mirror_airflow.dag_factory render --spec … "
    "--out dags/)": case(dag_import, "gone", exit_code=IMPORT_ERROR),
    "…: mirror(s) … have no DAG file in …: run python -m mirror_airflow.dag_factory render --spec … --out …": case(
        dag_import, "orders", "{dir}/dags", exit_code=IMPORT_ERROR),
}
