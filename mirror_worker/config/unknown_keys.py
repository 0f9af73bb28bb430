"""Unknown keys, all of them in one line, each with the known key it is most likely a typo of.

A spec with several typos used to take as many runs to fix as it had typos (only the first was reported).
The line stays one line (the command layer prints one line per error): `KEY: unknown key (did you mean
KNOWN?)`, the keys sorted, joined by "; ".
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# difflib's ratio above which a known key is offered: 0.6 (its default) offers `name` for `nme` and
# `queue-size` for `queue-sise`, and nothing for a key unlike any.
_CLOSE = 0.6


def suggestion(key: str, known: Iterable[str]) -> str | None:
    """The known key closest to `key`, if one is close enough."""
    close = difflib.get_close_matches(key, sorted(set(known)), n=1, cutoff=_CLOSE)
    return close[0] if close else None


def unknown_key(key: str, known: Iterable[str]) -> str:
    """`KEY: unknown key`, with ` (did you mean KNOWN?)` when one is close."""
    close = suggestion(key.rsplit(".", 1)[-1], known)
    return f"{key}: unknown key" + (f" (did you mean {close}?)" if close else "")


def unknown_keys(keys: Iterable[str], known: Iterable[str]) -> str:
    """Every key of `keys` as `unknown_key` says it, sorted, in one line."""
    known = list(known)
    return "; ".join(unknown_key(key, known) for key in sorted(set(keys)))
