"""Debian's headless Chromium driven by Selenium through /usr/bin/chromedriver (installed by scripts/setup-test.sh)."""

from __future__ import annotations

import shutil
from pathlib import Path

from devstack.paths import ROOT

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = ROOT / "tests" / "artifacts"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run", "--window-size=1400,900",
)


def start_chromium(user_data_dir: Path, extra_flags: tuple[str, ...] = (), logs: tuple[str, ...] = ()):
    """`logs`: the log types (Chrome's "browser" console, "performance" DevTools events) to keep for
    driver.get_log."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{', '.join(missing)} missing: run `make setup-test` (Debian chromium, chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, *extra_flags, f"--user-data-dir={user_data_dir}"):
        options.add_argument(flag)
    if logs:
        options.set_capability("goog:loggingPrefs", {kind: "ALL" for kind in logs})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(120)
    return driver


def screenshot(driver, name: str) -> Path:
    """Keep a PNG under tests/artifacts/ (git-ignored) as the test's evidence."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def remove_profile(user_data_dir: Path) -> None:
    shutil.rmtree(user_data_dir, ignore_errors=True)
