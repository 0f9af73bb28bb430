"""The mirror dashboard inside the Airflow UI, in a real browser: anonymous requests to every dashboard
endpoint are refused; a logged-in user sees the e2e mirror running with no lag; the mirror is stalled
(its lifecycle DAG paused, so its worker stops, then records produced) and the page shows it paused with
exactly the lag those records made, per partition and in total; resumed with a record the destination
refuses waiting in one partition, the page shows the mirror halted with that partition and its reason.

Real everything (shared fixtures of tests/e2e/conftest.py): `airflow standalone` loading plugins/, the
stack's Kafka clusters, the worker the DAG runs, Debian's Chromium. Screenshots: tests/artifacts/.
"""

from __future__ import annotations

import pytest
import requests
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.e2e import ui
from tests.e2e.browser import screenshot
from tests.e2e.waits import group_members, wait_until
from tests.kafka_util import end_offsets, produce
from tests.worker_util import committed_offsets, wait_for_count

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

PREFIX = "/mirror-dashboard"
RESUME_S = 420  # a DAG run (discover, ensure_topics, sync_schemas, then the worker) on two shared cores
PAUSE_STOP_S = 90
PAGE_CHANGE_S = 120  # the page samples at most every 10 s and refreshes itself every 15 s
LAG_VERDICT_S = 300  # a lag DAG run: 30 s of samples in the triggerer (conftest's lag settings), then the verdict


def _routes(name: str) -> list[str]:
    return [f"{PREFIX}/", f"{PREFIX}/api/mirrors", f"{PREFIX}/mirrors/{name}", f"{PREFIX}/api/mirrors/{name}",
            f"{PREFIX}/mirrors/{name}/report"]


def _refused(response: requests.Response) -> bool:
    if response.status_code in (401, 403):
        return True
    return response.status_code in (302, 303, 307) and "/auth/login" in response.headers.get("location", "")


def _token(airflow) -> str:
    response = requests.post(f"{airflow.url}/auth/token", json={"username": "admin", "password": airflow.password},
                             timeout=30)
    response.raise_for_status()
    return response.json()["access_token"]


def _partition_rows(driver) -> dict[str, dict[str, int]]:
    """The page's partition table: partition -> {lag, end}."""
    out = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "#partitions tr")[1:]:
        cells = [c.text.replace(",", "") for c in row.find_elements(By.TAG_NAME, "td")]
        out[cells[0]] = {"lag": int(cells[1]), "end": int(cells[4])}
    return out


def _page_shows(driver, url: str, state: str, total_lag: int, source_end: int):
    """Reload the mirror's page until its badge and total lag read as expected, from a sample that saw
    every record produced so far (`source_end` summed over partitions); returns what it saw."""
    seen = {}

    def check():
        driver.get(url)
        badge = driver.find_elements(By.CSS_SELECTOR, "h1 .state")
        lag = driver.find_elements(By.CSS_SELECTOR, "#summary .total-lag")
        if not badge or not lag:
            return False
        seen.update(state=badge[0].get_attribute("data-state"), lag=lag[0].text,
                    end=sum(p["end"] for p in _partition_rows(driver).values()))
        return seen == {"state": state, "lag": f"{total_lag:,}", "end": source_end}

    wait_until(check, PAGE_CHANGE_S, f"the dashboard showing {state} with lag {total_lag}", interval=5)
    return seen


def test_anonymous_requests_to_the_dashboard_are_refused(airflow, e2e_mirror):
    for path in _routes(e2e_mirror.name):
        response = requests.get(f"{airflow.url}{path}", allow_redirects=False, timeout=60)
        assert _refused(response), f"{path}: anonymous request answered {response.status_code}"
        assert e2e_mirror.topic not in response.text
        forged = requests.get(f"{airflow.url}{path}", headers={"Authorization": "Bearer not-a-token"},
                              allow_redirects=False, timeout=60)
        assert _refused(forged), f"{path}: a forged token answered {forged.status_code}"
    # The same routes answer a logged-in API client (so the refusals above are about authentication).
    token = _token(airflow)
    answered = requests.get(f"{airflow.url}{PREFIX}/api/mirrors", headers={"Authorization": f"Bearer {token}"},
                            timeout=120)
    assert answered.status_code == 200
    assert e2e_mirror.name in [m["name"] for m in answered.json()["mirrors"]]


def test_dashboard_shows_a_running_mirror_then_its_stall(stack, airflow, e2e_mirror, browser):
    source = stack["source"].kafka.bootstrap_servers
    destination = stack["destination"].kafka.bootstrap_servers
    mirror = e2e_mirror
    api = airflow.api()
    if api.dag(mirror.dag_id)["is_paused"]:  # another e2e test may have left it paused
        api.set_paused(mirror.dag_id, False)

    # The mirror runs and catches up: every record produced so far is committed.
    before = len(wait_for_count(destination, mirror.mirrored_topic, 0, timeout=5))
    produce(source, mirror.topic, [{"key": f"dash-{i}".encode(), "value": f"dash-{i}".encode()} for i in range(120)])
    wait_for_count(destination, mirror.mirrored_topic, before + 120, timeout=RESUME_S)

    ui.log_in(browser, airflow.url, "admin", airflow.password)
    page = f"{airflow.url}{PREFIX}/mirrors/{mirror.name}"
    produced = sum(end_offsets(source, mirror.topic, mirror.partitions).values())
    assert produced >= 120
    seen = _page_shows(browser, page, "running", 0, produced)
    assert seen == {"state": "running", "lag": "0", "end": produced}
    # The worker's metrics endpoint answers: its counter is shown, and no halt or conflict.
    assert "no metrics-port" not in browser.page_source and "not readable" not in browser.page_source
    produced_counter = browser.find_element(By.ID, "worker-produced").text
    assert "records produced" in produced_counter
    assert browser.find_element(By.ID, "halted").text == "No halted partition reported."
    screenshot(browser, "e2e-dashboard-1-mirror-running")

    # The overview lists it, with its state and lag, and links to its page.
    browser.get(f"{airflow.url}{PREFIX}/")
    row = WebDriverWait(browser, 60).until(
        lambda d: d.find_element(By.CSS_SELECTOR, f"tr[data-mirror='{mirror.name}']"))
    assert row.find_element(By.CSS_SELECTOR, ".state").get_attribute("data-state") == "running"
    assert row.find_element(By.CSS_SELECTOR, ".total-lag").text == "0"
    assert row.find_element(By.TAG_NAME, "a").get_attribute("href") == page
    screenshot(browser, "e2e-dashboard-2-overview")

    # Inside the Airflow UI: the nav entry's page frames the dashboard.
    browser.get(f"{airflow.url}/plugin/kafka-mirrors")
    frame = WebDriverWait(browser, ui.PAGE_S).until(
        lambda d: d.find_element(By.CSS_SELECTOR, f"iframe[src*='{PREFIX}']"))
    browser.switch_to.frame(frame)
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, f"tr[data-mirror='{mirror.name}']"))
    browser.switch_to.default_content()
    screenshot(browser, "e2e-dashboard-3-inside-airflow-ui")

    # Stall the mirror: pause its lifecycle DAG (the worker stops), then produce while nothing mirrors.
    api.set_paused(mirror.dag_id, True)
    wait_until(lambda: group_members(source, mirror.group) == 0, PAUSE_STOP_S, "the worker stopped after the pause")
    committed = committed_offsets(source, mirror.group, mirror.topic, mirror.partitions)
    produce(source, mirror.topic, [{"key": f"stall-{i}".encode(), "value": f"stall-{i}".encode()} for i in range(75)])
    try:
        seen = _page_shows(browser, page, "paused", 75, produced + 75)
        assert seen == {"state": "paused", "lag": "75", "end": produced + 75}
        assert "worker metrics not readable" in browser.page_source  # the stopped worker's endpoint is gone
        lags = {name: row["lag"] for name, row in _partition_rows(browser).items()}
        assert sum(lags.values()) == 75 and len(lags) == mirror.partitions
        # The chart has a line per partition: lag over time from the samples of both phases.
        lines = browser.find_elements(By.CSS_SELECTOR, "svg#lag-chart polyline.series")
        assert {line.get_attribute("data-series") for line in lines} == set(lags)
        screenshot(browser, "e2e-dashboard-4-mirror-stalled")

        # The JSON API says the same to a token holder.
        token = _token(airflow)
        data = requests.get(f"{airflow.url}{PREFIX}/api/mirrors/{mirror.name}",
                            headers={"Authorization": f"Bearer {token}"}, timeout=120).json()
        assert (data["state"], data["total_lag"]) == ("paused", 75)
        assert {p["partition"]: p["committed"] for p in data["partitions"]} == {
            f"source/{mirror.topic}/{p}": offset for p, offset in committed.items()}

        # The lag sensor judges the stalled mirror (its DAG unpaused for one run): its failing verdict is listed.
        api.set_paused(f"{mirror.dag_id}__lag", False)
        verdict = wait_until(lambda: _failing_verdict(browser, page), LAG_VERDICT_S, "a failing lag-sensor verdict",
                             interval=5)
        api.set_paused(f"{mirror.dag_id}__lag", True)
        assert verdict[1] in ("STALL", "STOP") and verdict[2] == "75", verdict
        assert f"source/{mirror.topic}/" in verdict[3]
        _scroll_to(browser, "verdicts")
        screenshot(browser, "e2e-dashboard-5-lag-sensor-verdict")

        # A halt: the destination now takes records of at most 1000 bytes, and a bigger one waits in
        # partition 1; the resumed worker mirrors the backlog before it and halts the partition there.
        _set_topic_config(destination, mirror.mirrored_topic, "max.message.bytes", "1000")
        produce(source, mirror.topic, [{"key": b"big", "value": b"x" * 5000, "partition": 1}])
    finally:
        api.set_paused(mirror.dag_id, False)  # leave the shared mirror running
    try:
        halt = wait_until(lambda: _halted_rows(browser, page), RESUME_S, "the dashboard showing the halted partition",
                          interval=5)
        assert halt == [["source", mirror.topic, "1", f"record of 5003 bytes exceeds destination "
                                                       f"{mirror.mirrored_topic} max.message.bytes=1000"]]
        assert browser.find_element(By.CSS_SELECTOR, "h1 .state").get_attribute("data-state") == "halted"
        _scroll_to(browser, "halted")
        screenshot(browser, "e2e-dashboard-6-partition-halted")
    finally:
        _heal(source, destination, api, mirror)


def _heal(source: str, destination: str, api, mirror) -> None:
    """Leave the shared e2e mirror as the next test expects it: the destination takes the big record again and
    a new worker (paused, then unpaused) resumes the halted partition at its committed offset."""
    _set_topic_config(destination, mirror.mirrored_topic, "max.message.bytes", "1048588")  # Kafka's default
    api.set_paused(mirror.dag_id, True)
    wait_until(lambda: group_members(source, mirror.group) == 0, PAUSE_STOP_S, "the halted worker stopped")
    api.set_paused(mirror.dag_id, False)


def _set_topic_config(bootstrap: str, topic: str, key: str, value: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    resource = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result arrives
    admin.incremental_alter_configs([resource])[resource].result(30)


def _halted_rows(driver, url: str) -> list[list[str]] | None:
    """The halted-partitions table of the mirror's page once it shows a row whose reason the task log gave."""
    driver.get(url)
    rows = [[c.text for c in row.find_elements(By.TAG_NAME, "td")]
            for row in driver.find_elements(By.CSS_SELECTOR, "table#halted tr")[1:]]
    if rows and all("task log" not in row[3] for row in rows):
        return rows
    return None


def _failing_verdict(driver, url: str) -> list[str] | None:
    """The newest row of the lag-sensor verdicts table when it is a failing one: [when, status, lag, detail]."""
    driver.get(url)
    rows = driver.find_elements(By.CSS_SELECTOR, "table#verdicts tr")[1:]
    if rows and rows[0].find_elements(By.CSS_SELECTOR, "td.verdict-failing"):
        return [c.text for c in rows[0].find_elements(By.TAG_NAME, "td")]
    return None


def _scroll_to(driver, element_id: str) -> None:
    """Bring a section into the screenshot (the window is 900 px high)."""
    driver.execute_script("arguments[0].scrollIntoView()", driver.find_element(By.ID, element_id))
