"""Include/exclude regexes over names (principals, consumer groups): whole-string matches (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from mirror_worker.exceptions import ConfigError


@dataclass(frozen=True)
class NameFilter:
    """Full matches of `include` (every name when empty), minus full matches of `exclude`."""

    include: tuple[re.Pattern, ...] = ()
    exclude: tuple[re.Pattern, ...] = ()

    def allows(self, name: str) -> bool:
        if self.include and not any(p.fullmatch(name) for p in self.include):
            return False
        return not any(p.fullmatch(name) for p in self.exclude)


def compile_regexes(expressions: Iterable[str], key: str) -> tuple[re.Pattern, ...]:
    """Each expression compiled; an invalid one is a ConfigError naming `key`."""
    compiled = []
    for expression in expressions:
        try:
            compiled.append(re.compile(expression))
        except re.error as exc:
            raise ConfigError(f"{key}: invalid regex {expression!r}: {exc}") from None
    return tuple(compiled)
