"""The documentation site (issue 32): `mkdocs build --strict` passes (broken links, missing pages and missing
benchmark snippets fail it), the generated references hold every spec key, CLI flag and metric the code
defines, and the README stays a front page that links into the site."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _references():
    spec = importlib.util.spec_from_file_location("docs_references", ROOT / "docs" / "hooks" / "references.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def references():
    return _references()


def test_site_builds_strict(tmp_path):
    # Never -q: it drops warnings before --strict counts them (a broken anchor passed with it).
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    latest = (ROOT / "bench" / "results" / "latest.md").read_text()
    first_row = next(line for line in latest.splitlines() if line.startswith("| worker |"))
    benchmarks = (tmp_path / "site" / "benchmarks" / "index.html").read_text()
    assert first_row.split("|")[3].strip() in benchmarks, "the latest benchmark table is not included"


def test_spec_reference_lists_every_key(references):
    rendered = references.render("spec")
    missing = [key for _title, prefix, model, skip in references.spec_sections()
               for key in references.spec_keys(model, prefix, skip) if f"| `{key}` |" not in rendered]
    assert not missing, f"spec keys missing from the reference: {missing}"
    assert "| `group-id` |" in rendered and "| `airflow.lag.window-minutes` |" in rendered
    undescribed = re.findall(r"^\| `([^`]+)` \|.*\|  \|$", rendered, re.MULTILINE)
    assert not undescribed, f"spec keys without a description: {undescribed}"


def test_cli_reference_lists_every_flag(references):
    rendered = references.render("cli")
    for command, parser in references.cli_parsers():
        assert f"## `{command}`" in rendered
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for flag in action.option_strings:
                assert flag in rendered, f"{command}: {flag} missing from the CLI reference"
    assert "## `python -m mirror_worker translate-offsets`" in rendered and "`--exactly.once`" in rendered


def test_metrics_reference_lists_every_metric(references):
    from mirror_worker.metrics import MirrorMetrics

    rendered = references.render("metrics")
    names = {m.name for m in MirrorMetrics("m").registry.collect()}
    assert names and all(f"`{name}" in rendered for name in names)
    assert "| `mirror_data_loss_total` | counter |" in rendered


def test_readme_is_a_front_page_linking_into_the_site():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 8 * 1024, f"README.md is {len(readme.encode())} bytes (at most 8 KiB)"
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links, "the README links into the site"
    assert not [link for link in links if not (ROOT / link).is_file()], "README links to missing docs pages"
    assert "make run" in readme and "make test" in readme
