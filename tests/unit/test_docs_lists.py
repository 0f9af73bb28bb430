"""docs/hooks/lists.py: a list right under a paragraph (no blank line between, as the benchmark result files and
several pages write them) renders as a list, as CommonMark has it, not as a paragraph with literal "- "."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import markdown
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lists():
    spec = importlib.util.spec_from_file_location("docs_lists", ROOT / "docs" / "hooks" / "lists.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render(lists, text: str) -> str:
    return markdown.markdown(text, extensions=["admonition", "pymdownx.superfences", lists.ListsWithoutBlankLine()])


def test_a_list_under_a_paragraph_is_a_list(lists):
    html = render(lists, "Results:\n- one\n- two\n\nOrdered:\n1. first\n2. second\n")
    assert html.count("<li>") == 4 and "<ul>" in html and "<ol>" in html
    assert "- one" not in html and "<p>Results:</p>" in html


@pytest.mark.parametrize("text", [
    "released in\n2024. The next line goes on",      # only an ordered list starting at 1 interrupts a paragraph
    "a line\n    - indented four: a lazy continuation",
    "```\ntext\n- not a list in a fence\n```\n",
    "- a\n  continued\n- b\n",                         # already a list: left alone (stays tight)
])
def test_what_is_not_a_list_start_stays_as_it_was(lists, text):
    assert render(lists, text) == markdown.markdown(text, extensions=["admonition", "pymdownx.superfences"])


def test_lists_inside_admonitions(lists):
    html = render(lists, "!!! note\n    Two cases:\n    - one\n    - two\n")
    assert html.count("<li>") == 2 and "- one" not in html


def test_the_built_site_has_no_run_on_list(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "-d", str(site)], cwd=ROOT,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    run_on = [f"{page.relative_to(site)}: {line.strip()[:80]}"
              for page in site.rglob("*.html")
              for paragraph in re.findall(r"<p>((?:(?!</p>).)*)</p>", page.read_text(), re.S)
              for line in paragraph.split("\n")[1:] if re.match(r"\s*(- |\* |1\. )", line)]
    assert not run_on, "paragraphs with literal list markers:\n" + "\n".join(run_on)
