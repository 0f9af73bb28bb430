"""A list right under a paragraph renders as a list (a MkDocs hook, mkdocs.yml `hooks:`).

Python-Markdown needs a blank line before a list; without one, `Results:\\n- one\\n- two` is one paragraph with
literal "- " (the benchmark result files included from bench/results/ and several pages are written that way,
as GitHub renders them). This preprocessor adds the blank line where CommonMark lets a list interrupt a
paragraph: a bullet item, or an ordered item numbered 1, at the paragraph's own indentation (up to 3 more
spaces; 4 more is a lazy continuation line). It runs after the snippets are included and the fenced code is
stashed (priorities 32 and 25), so neither an included file is missed nor a fence's text touched.
"""

from __future__ import annotations

import re

from markdown import Extension
from markdown.preprocessors import Preprocessor

LIST_START = re.compile(r"^( *)(?:[-*+]|1[.)])[ \t]+\S")
ANY_ITEM = re.compile(r"^ *(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def separate_lists(lines: list[str]) -> list[str]:
    out: list[str] = []
    in_paragraph = False  # the current run of non-blank lines is a paragraph (not a list, not yet)
    for line in lines:
        if not line.strip():
            in_paragraph = False
        elif not out or not out[-1].strip():
            in_paragraph = not ANY_ITEM.match(line)
        elif in_paragraph:
            start = LIST_START.match(line)
            if start and 0 <= len(start.group(1)) - _indent(out[-1]) <= 3:
                out.append("")
                in_paragraph = False
        out.append(line)
    return out


class ListsWithoutBlankLine(Extension):
    def extendMarkdown(self, md) -> None:  # noqa: N802 (Python-Markdown's name)
        md.preprocessors.register(_Preprocessor(md), "lists_without_blank_line", 22)


class _Preprocessor(Preprocessor):
    def run(self, lines: list[str]) -> list[str]:
        return separate_lists(lines)


def on_config(config, **kwargs):
    config.markdown_extensions.append(ListsWithoutBlankLine())
    return config
