"""The docs site offline, in headless Chromium: every request the pages make stays on the site's own server (a
dead proxy takes every other one), the console shows no error, the home page's Mermaid diagram is drawn as SVG
and search answers. Before, Material fetched Mermaid from unpkg.com: offline the home page showed the raw
`flowchart LR` text and search hung at "Initializing search"."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devstack.paths import ROOT
from tests.e2e.browser import remove_profile, screenshot, start_chromium
from tests.e2e.waits import wait_until

pytestmark = pytest.mark.e2e  # the browser tests' group; no stack, no Airflow

# Network off: every request not to loopback goes to a proxy that is not there (port 9, discard, closed);
# Chromium bypasses proxies for loopback by default. No name resolves either.
OFFLINE = ("--proxy-server=http://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1")
VENDORED = ROOT / "docs" / "assets" / "vendor" / "mermaid.min.js"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> str:
    """The built site served on 127.0.0.1 (a free port); its base URL."""
    assert VENDORED.is_file(), f"{VENDORED.relative_to(ROOT)} missing: run `make setup-test`"
    out = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(out)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def offline_browser():
    profile = Path(tempfile.mkdtemp(prefix="kafka-mirror-docs-chromium-"))
    driver = start_chromium(profile, extra_flags=OFFLINE, logs=("browser", "performance"))
    try:
        yield driver
    finally:
        driver.quit()
        remove_profile(profile)


def _requested_urls(driver) -> list[str]:
    events = (json.loads(entry["message"])["message"] for entry in driver.get_log("performance"))
    return [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]


def _svg_in_shadow(node: dict) -> bool:
    """Material draws each diagram into a closed shadow root of a div.mermaid: only DevTools (pierce) sees it."""
    attributes = node.get("attributes") or []
    classes = dict(zip(attributes[::2], attributes[1::2])).get("class", "").split()
    if node.get("nodeName") == "DIV" and "mermaid" in classes:
        return any(_has_svg(root) for root in node.get("shadowRoots") or [])
    return any(_svg_in_shadow(child) for child in node.get("children") or [])


def _has_svg(node: dict) -> bool:
    if node.get("nodeName", "").lower() == "svg" and node.get("childNodeCount", len(node.get("children") or [])):
        return True
    return any(_has_svg(child) for child in node.get("children") or [])


_SEARCH_STATE = """
const meta = document.querySelector('.md-search-result__meta');
const links = Array.from(document.querySelectorAll('.md-search-result__item a'), a => a.href);
return {meta: meta ? meta.textContent : '', links: links};
"""


def _search_state(driver) -> dict:
    """The search header and every result's link, read at one instant."""
    return driver.execute_script(_SEARCH_STATE)


def _with_result(state: dict, needle: str) -> dict | None:
    return state if any(needle in link for link in state["links"]) else None


def test_the_docs_site_works_offline(site, offline_browser):
    from selenium.webdriver.common.by import By

    driver = offline_browser
    driver.get(site + "/")
    # Material replaces the diagram's <pre> by a div.mermaid once Mermaid has rendered it.
    wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, "div.mermaid"), 60, "the home page's Mermaid diagram",
               interval=0.25)
    wait_until(lambda: _svg_in_shadow(driver.execute_cdp_cmd("DOM.getDocument", {"depth": -1, "pierce": True})["root"]),
               30, "an SVG inside the diagram", interval=0.25)
    assert "flowchart LR" not in driver.find_element(By.TAG_NAME, "body").text
    screenshot(driver, "docs-offline-1-home")

    search = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
    search.click()
    search.send_keys("offset translation")
    # Search re-renders its result list as the query grows: read the list and its header in one script, never
    # through element handles that the next render makes stale (CI failed once that way).
    state = wait_until(lambda: _with_result(_search_state(driver), "offset-translation"), 30,
                       "a search result for 'offset translation' linking the offset-translation page", interval=0.25)
    assert "Initializing" not in state["meta"] and "matching" in state["meta"], state
    screenshot(driver, "docs-offline-2-search")

    off_site = [url for url in _requested_urls(driver)  # chrome:// (the first blank tab), data: and blob: stay
                if url.startswith(("http:", "https:", "ws:", "wss:")) and not url.startswith(site + "/")]
    assert not off_site, f"requests that left the site: {off_site}"
    errors = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert not errors, "console errors:\n" + "\n".join(errors)


def test_setup_fetches_the_pinned_mermaid(tmp_path):
    """scripts/fetch-docs-assets.sh keeps a copy that has the pinned hash, and says so (no network then)."""
    copy = tmp_path / "repo"
    (copy / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "fetch-docs-assets.sh", copy / "scripts")
    (copy / "docs" / "assets" / "vendor").mkdir(parents=True)
    shutil.copy(VENDORED, copy / "docs" / "assets" / "vendor")
    done = subprocess.run(["bash", str(copy / "scripts" / "fetch-docs-assets.sh")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr
