"""A person in the Airflow UI: log in, pause a running mirror's lifecycle DAG, see its worker stop
gracefully (group empty, every record produced before the pause committed), unpause, see it resume.

Real everything: `airflow standalone`, the stack's Kafka clusters, the mirror worker the DAG runs, and
Debian's Chromium. Screenshots are kept in tests/artifacts/.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e import ui
from tests.e2e.browser import screenshot
from tests.e2e.waits import group_members as _group_members
from tests.e2e.waits import wait_until as _wait
from tests.kafka_util import produce
from tests.worker_util import committed_offsets, read_topic, wait_for_count

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

# The pause contract: the worker stops (flushed, committed) within 60 s of the pause.
PAUSE_STOP_S = 60
# A new DAG run (discover, ensure_topics, sync_schemas, then the worker) on two shared cores.
RESUME_S = 420


def _records(tag: str, count: int) -> list[dict]:
    return [{"key": f"{tag}-{i}".encode(), "value": f"{tag}-{i}".encode()} for i in range(count)]


def test_pause_and_unpause_a_mirror_from_the_ui(stack, airflow, e2e_mirror, browser):
    source = stack["source"].kafka.bootstrap_servers
    destination = stack["destination"].kafka.bootstrap_servers
    mirror = e2e_mirror
    api = airflow.api()

    # The lifecycle DAG (unpaused by the fixture) runs its worker, which mirrors.
    assert api.dag(mirror.dag_id)["is_paused"] is False
    produce(source, mirror.topic, _records("before-pause", 300))
    mirrored = wait_for_count(destination, mirror.mirrored_topic, 300, timeout=RESUME_S)
    assert len(mirrored) >= 300, f"the mirror did not run: {len(mirrored)}/300 records; {_diagnose(api, mirror)}"
    assert _group_members(source, mirror.group) > 0

    ui.log_in(browser, airflow.url, "admin", airflow.password)
    ui.open_dag(browser, airflow.url, mirror.dag_id)
    assert ui.is_paused(browser) is False
    screenshot(browser, "e2e-1-mirror-running")

    # Pause in the UI: the worker flushes, commits and leaves the group.
    clicked = time.monotonic()
    ui.toggle_pause(browser)
    _wait(lambda: api.dag(mirror.dag_id)["is_paused"], 30, "the DAG paused after the click")
    _wait(lambda: _group_members(source, mirror.group) == 0, clicked + PAUSE_STOP_S - time.monotonic(),
          "the mirror group empty after the pause")
    stopped_after = time.monotonic() - clicked
    assert stopped_after <= PAUSE_STOP_S
    committed = committed_offsets(source, mirror.group, mirror.topic, mirror.partitions)
    assert sum(committed.values()) == 300, f"committed {committed} after the pause, expected 300 records"
    browser.refresh()
    ui.wait_paused(browser, True)
    screenshot(browser, "e2e-2-mirror-paused")

    # Paused means stopped: records produced now wait on the source.
    produce(source, mirror.topic, _records("while-paused", 50))
    time.sleep(10)  # ample for a running worker to copy 50 records; none may arrive
    assert len(read_topic(destination, mirror.mirrored_topic)) == 300

    # Unpause in the UI: a new run resumes from the committed offsets.
    unpaused = time.monotonic()
    ui.toggle_pause(browser)
    _wait(lambda: api.dag(mirror.dag_id)["is_paused"] is False, 30, "the DAG unpaused after the click")
    ui.wait_paused(browser, False)
    produce(source, mirror.topic, _records("after-unpause", 100))
    mirrored = wait_for_count(destination, mirror.mirrored_topic, 450, timeout=RESUME_S)
    resumed_after = time.monotonic() - unpaused
    values = sorted(m.value() for m in mirrored)
    assert len(mirrored) == 450, f"{len(mirrored)}/450 mirrored after unpausing; {_diagnose(api, mirror)}"
    assert len(set(values)) == 450  # resumed from the committed offsets: no record copied twice
    screenshot(browser, "e2e-3-mirror-resumed")
    print(f"\nmirror group empty {stopped_after:.0f}s after the pause click; "
          f"mirroring resumed {resumed_after:.0f}s after the unpause click")


def _diagnose(api, mirror) -> str:
    """The DAG runs and task states, for a failure message that says where it stuck."""
    try:
        runs = api.dag_runs(mirror.dag_id)[:3]
        return "; ".join(
            f"run {r['dag_run_id']} {r['state']}: "
            + ", ".join(f"{t['task_id']}={t['state']}" for t in api.task_instances(mirror.dag_id, r["dag_run_id"]))
            for r in runs
        ) or "no DAG run"
    except Exception as exc:  # diagnostics only
        return f"(no diagnostics: {exc})"
