"""Values from a cluster or a person (consumer-group ids, error reasons, user names) inside Markdown that people
act on: the failover approval and its report (issue 46, item 6). A group id may hold any character, and one with
a backtick and a newline wrote its own bold line into the approval ("All consumers already on the destination:
nothing will be lost."). Both helpers keep a value on its own line and inside its own span, whatever it holds.
"""

from __future__ import annotations

import re

# Line breaks and every other control character (Markdown ends a line, a paragraph or a table row on them),
# and Unicode's line and paragraph separators: shown as escapes (`\n`), never acted on.
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]")
# What can start emphasis, code, a link, raw HTML, an entity or a table cell in the middle of a line. Line-start
# syntax (#, -, >, digits) cannot apply: a value never starts a line (the text before it is ours).
_INLINE = re.compile(r"([\\`*_\[\]<>|~&!])")


def _visible(text: str, backslash: str = "") -> str:
    """Control characters as their Python escapes (`\\n`), the escape's backslash itself prefixed by `backslash`."""
    return _CONTROL.sub(lambda m: backslash + m.group().encode("unicode_escape").decode("ascii"), text)


def md_text(value: object) -> str:
    """`value` as literal text in a Markdown line (backslash escapes, control characters shown escaped)."""
    return _visible(_INLINE.sub(r"\\\1", str(value)), backslash="\\")


def md_code(value: object, in_table: bool = False) -> str:
    """`value` as an inline code span, fenced by more backticks than any run inside it; `in_table`: `|` escaped
    (GFM splits table cells on it before anything else, even in code)."""
    text = _visible(str(value))
    text = text.replace("|", "\\|") if in_table else text
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    padded = f" {text} " if text.startswith("`") or text.endswith("`") else text
    return f"{fence}{padded}{fence}"
