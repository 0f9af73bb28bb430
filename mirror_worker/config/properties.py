"""Java `.properties` files, as MirrorMaker's --consumer.config / --producer.config take them."""

from __future__ import annotations

from pathlib import Path

from mirror_worker.exceptions import ConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """key=value / key: value / key value lines; # and ! comments; backslash continuations and escapes."""
    result: dict[str, str] = {}
    for logical in _logical_lines(text):
        key, value = _split(logical)
        result[_unescape(key)] = _unescape(value)
    return result


def load_properties(path: str | Path) -> dict[str, str]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (PermissionError, IsADirectoryError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file unreadable: {path}: {exc.__class__.__name__}") from None
    return parse_properties(text)


def _logical_lines(text: str):
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        # An odd number of trailing backslashes continues the line.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        pending += line
        yield pending
        pending = ""
    if pending:
        yield pending


def _split(line: str) -> tuple[str, str]:
    """The key ends at the first unescaped '=', ':' or blank; one separator and blanks around it go."""
    blanks = " \t\f"
    i = 0
    while i < len(line) and line[i] not in "=:" + blanks:
        i += 2 if line[i] == "\\" else 1
    key, j = line[:i], i
    while j < len(line) and line[j] in blanks:
        j += 1
    if j < len(line) and line[j] in "=:":
        j += 1
    while j < len(line) and line[j] in blanks:
        j += 1
    return key, line[j:]


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out, i = [], 0
    while i < len(s):
        ch = s[i]
        if ch == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u" and i + 6 <= len(s):
                out.append(chr(int(s[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)
