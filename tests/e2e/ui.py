"""What a person does in the Airflow 3 UI, as Selenium steps. Waits are generous: the React UI takes
tens of seconds to load on two busy cores."""

from __future__ import annotations

import time

from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

PAGE_S = 180
# The DAG page's pause switch: data-state "checked" while the DAG runs (unpaused).
PAUSE_TOGGLE = (By.CSS_SELECTOR, "label[data-testid='toggle-pause']")


def log_in(driver, url: str, username: str, password: str) -> None:
    driver.get(f"{url}/auth/login")
    wait = WebDriverWait(driver, PAGE_S)
    wait.until(EC.presence_of_element_located((By.NAME, "username"))).send_keys(username)
    driver.find_element(By.NAME, "password").send_keys(password)
    wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, "button[type='submit']"))).click()
    wait.until(lambda d: "/auth/login" not in d.current_url)


def open_dag(driver, url: str, dag_id: str) -> None:
    driver.get(f"{url}/dags/{dag_id}")
    WebDriverWait(driver, PAGE_S).until(EC.presence_of_element_located(PAUSE_TOGGLE))


def is_paused(driver) -> bool:
    return driver.find_element(*PAUSE_TOGGLE).get_attribute("data-state") != "checked"


def wait_paused(driver, paused: bool, timeout: float = PAGE_S, reload_s: float | None = None) -> None:
    """Wait for the switch to show `paused`. `reload_s`: reload the page that often, as a person does when
    the state was changed elsewhere (by a task through the REST API) and the page may hold what it read."""
    reloaded = time.monotonic()

    def shown(d) -> bool:
        nonlocal reloaded
        if d.find_elements(*PAUSE_TOGGLE) and is_paused(d) == paused:
            return True
        if reload_s is not None and time.monotonic() - reloaded > reload_s:
            d.refresh()
            reloaded = time.monotonic()
        return False

    WebDriverWait(driver, timeout).until(shown, f"the pause switch did not show {'paused' if paused else 'running'}")


def toggle_pause(driver) -> None:
    """Click the DAG's pause switch, and confirm when the UI asks."""
    WebDriverWait(driver, PAGE_S).until(EC.element_to_be_clickable(PAUSE_TOGGLE)).click()
    try:
        confirm = WebDriverWait(driver, 3).until(EC.element_to_be_clickable(
            (By.XPATH, "//div[@role='dialog']//button[normalize-space()='Confirm' or normalize-space()='Pause' "
                       "or normalize-space()='Unpause']")))
        confirm.click()
    except TimeoutException:
        pass  # no confirmation asked


def open_required_action(driver, url: str, dag_id: str, run_id: str, task_id: str, expect_text: str) -> None:
    """The task's Required Actions page (the link Airflow's HITLOperator.generate_link_to_ui makes),
    once it shows `expect_text` (the body rendered from markdown)."""
    from urllib.parse import quote

    driver.get(f"{url}/dags/{dag_id}/runs/{quote(run_id, safe='')}/tasks/{task_id}/required_actions")
    WebDriverWait(driver, PAGE_S).until(
        lambda d: expect_text in d.find_element(By.TAG_NAME, "body").text,
        f"the required action of {task_id} did not show {expect_text!r}",
    )


def choose(driver, option: str) -> None:
    """Click a human-in-the-loop option (ApprovalOperator: Approve / Reject) and wait for the response to
    be recorded (the option buttons go away)."""
    button = (By.XPATH, f"//button[normalize-space()='{option}']")
    WebDriverWait(driver, PAGE_S).until(EC.element_to_be_clickable(button)).click()
    WebDriverWait(driver, PAGE_S).until(
        lambda d: "Response received" in d.find_element(By.TAG_NAME, "body").text or not d.find_elements(*button),
        f"the response {option!r} was not recorded",
    )
