"""`make run` as the quickstart describes it, on a stack of its own: `devstack up`, `devstack airflow` and the
demo (`python -m devstack.demo`), the Makefile's three steps (not `make run` itself: its `setup` step would
reinstall the venv). The live table shows the copy while the orders are produced, no librdkafka line reaches
the terminal, the demo mirror's dashboard page reads the worker's metrics (halts, schema conflicts), and after
the demo a slow stream of orders keeps the mirror live until the stack is stopped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests
import yaml

from devstack import Stack
from devstack.airflow import Airflow
from devstack.demo import DEMO_MIRROR, MIRRORED_TOPIC, end_offsets
from devstack.net import free_port
from devstack.paths import ROOT
from devstack.stream import STREAM_SERVICE, TOPIC

# Starts Airflow: grouped with the browser tests (tests/conftest.py), one Airflow at a time on the two cores.
pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(1500)]

# A row of the live table: second (or "final"), produced, mirrored, committed.
ROW = re.compile(r"^\s+(\d+|final)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")


def _run(root: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEVSTACK_ROOT": str(root)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _dashboard(airflow: Airflow, path: str) -> requests.Response:
    token = requests.post(f"{airflow.url}/auth/token", json={"username": "admin", "password": airflow.password},
                          timeout=30)
    token.raise_for_status()
    return requests.get(f"{airflow.url}/mirror-dashboard{path}", timeout=60,
                        headers={"Authorization": f"Bearer {token.json()['access_token']}"})


def _first_minute_screenshots(airflow: Airflow, demo_started: float) -> None:
    """What a newcomer sees in the demo's first minutes, taken in the browser for the quickstart page (issue 44):
    the demo mirror's dashboard page, then the verification report once the verify DAG (unpaused by the demo when
    its orders are mirrored) wrote it. tests/artifacts/quickstart-*.png; docs/images/ holds copies of a run's."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.e2e import ui
    from tests.e2e.browser import remove_profile, screenshot, start_chromium

    profile = Path(tempfile.mkdtemp(prefix="kafka-mirror-quickstart-chromium-"))
    browser = start_chromium(profile)
    try:
        ui.log_in(browser, airflow.url, "admin", airflow.password)
        browser.get(f"{airflow.url}/mirror-dashboard/mirrors/{DEMO_MIRROR}")
        WebDriverWait(browser, 60).until(lambda d: "records produced" in d.find_element(By.ID, "worker-produced").text)
        screenshot(browser, "quickstart-1-dashboard")
        deadline = time.monotonic() + 420
        while _dashboard(airflow, f"/mirrors/{DEMO_MIRROR}/report").status_code != 200:
            assert time.monotonic() < deadline, "the demo's verify DAG wrote no report within 7 minutes"
            time.sleep(5)
        browser.get(f"{airflow.url}/mirror-dashboard/mirrors/{DEMO_MIRROR}/report")
        WebDriverWait(browser, 60).until(lambda d: "checked" in d.page_source)
        assert "nothing to check" not in browser.page_source.lower()  # the demo's orders were there to check
        screenshot(browser, "quickstart-2-verify-report")
        print(f"\nfirst-minute screenshots: report {time.monotonic() - demo_started:.0f} s after the demo started",
              flush=True)
    finally:
        browser.quit()
        remove_profile(profile)


def test_make_run_shows_the_copy_live_keeps_client_logs_out_and_feeds_the_dashboard():
    # Not under pytest's basetemp: concurrent pytest sessions of the same user rotate those away.
    root = Path(tempfile.mkdtemp(prefix="kafka-mirror-quickstart-"))
    stack = Stack(root)
    try:
        up = _run(root, "-m", "devstack", "up", timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        started = _run(root, "-m", "devstack", "airflow", timeout=900)
        assert started.returncode == 0, started.stdout + started.stderr
        demo_started = time.monotonic()
        demo = _run(root, "-m", "devstack.demo", timeout=900)
        (ROOT / "tests" / "artifacts").mkdir(exist_ok=True)
        (ROOT / "tests" / "artifacts" / "quickstart-demo.txt").write_text(demo.stdout + "\n--- stderr\n" + demo.stderr)
        assert demo.returncode == 0, demo.stdout + demo.stderr

        # The copy is seen live: the orders are produced once the worker holds the mirror's partitions, so the rows
        # printed while they are produced count mirrored records, more at each row. The first row (3 s in) may
        # still show none under load (a CI run, four test sessions on two cores: 0 at 3 s, 1,200 of 1,200 at 6 s;
        # the worker's first copy also registers the orders' schema on the destination's registry).
        rows = [m.groups() for m in map(ROW.match, demo.stdout.splitlines()) if m]
        assert rows and rows[-1][0] == "final", demo.stdout
        live = [(second, int(mirrored)) for second, _produced, mirrored, _committed in rows[:-1]]
        counts = [mirrored for _second, mirrored in live]
        assert len(live) == 5 and all(n > 0 for n in counts[1:]), f"live rows (second, mirrored): {live}"
        assert counts == sorted(counts) and counts[-1] > counts[1], f"live rows (second, mirrored): {live}"

        # Client noise stays in the logs: no librdkafka line (`%<level>|<time>|<facility>|...`) on the terminal.
        noise = [line for line in (demo.stdout + demo.stderr).splitlines() if re.match(r"%\d\|", line)]
        assert not noise, f"librdkafka lines on the terminal: {noise}"

        # The dashboard reads the demo mirror's worker: its metrics port is set and answers.
        airflow = Airflow(stack)
        demo_spec = next(m for g in yaml.safe_load(airflow.spec.read_text())["groups"] for m in g["mirrors"]
                         if m["name"] == DEMO_MIRROR)
        assert demo_spec.get("metrics-port"), f"the demo mirror sets no metrics-port: {demo_spec}"
        view = _dashboard(airflow, f"/api/mirrors/{DEMO_MIRROR}")
        assert view.status_code == 200, view.text
        view = view.json()
        assert not [n for n in view["notes"] if "metrics" in n], view["notes"]
        assert view["worker_produced"] and view["worker_produced"] > 0, json.dumps(view)[:2000]
        assert f"{airflow.url}/plugin/kafka-mirrors" in demo.stdout  # where to find the dashboard
        page = _dashboard(airflow, f"/mirrors/{DEMO_MIRROR}")
        assert page.status_code == 200 and 'id="worker-produced"' in page.text
        assert "No halted partition reported." in page.text and "No schema conflict reported." in page.text
        _first_minute_screenshots(airflow, demo_started)

        # After the demo's burst a slow stream keeps the mirror live (issue 44 item 4: every chart went flat): the
        # source keeps growing and the copy follows; stopping the stack stops the stream with the rest.
        stream = stack.service(STREAM_SERVICE)
        assert stream.is_running(), demo.stdout[-1500:]
        src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
        after_demo = end_offsets(src, TOPIC)
        deadline = time.monotonic() + 90
        while not (end_offsets(src, TOPIC) > after_demo and end_offsets(dst, MIRRORED_TOPIC) > after_demo):
            assert time.monotonic() < deadline, (after_demo, end_offsets(src, TOPIC), end_offsets(dst, MIRRORED_TOPIC),
                                                 stream.log_file.read_text()[-2000:])
            time.sleep(2)
        stack.down()
        assert not stream.is_running()
    finally:
        stack.down()
        shutil.rmtree(root, ignore_errors=True)


def test_the_demos_clients_log_to_its_log_file_not_the_terminal(tmp_path):
    """No server needed: a closed port makes librdkafka log a failed connection every few milliseconds."""
    script = ("import sys; from pathlib import Path; from devstack import demo\n"
              "demo.log_to(Path(sys.argv[1]))\n"
              "try:\n    demo.end_offsets(sys.argv[2], 'demo.orders')\nexcept Exception as exc:\n    print(exc)\n")
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "demo.log"), f"127.0.0.1:{free_port()}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "Failed to get metadata" in run.stdout, run.stdout + run.stderr
    assert not [line for line in (run.stdout + run.stderr).splitlines() if re.match(r"%\d\|", line)], run.stderr[:500]
    assert "Connection refused" in (tmp_path / "demo.log").read_text()
