"""Pydantic models of the spec's Airflow mappings (`airflow:`, `lag:`, `alerts:`): kebab-case keys
only, unknown keys rejected, the first problem as one line naming the key."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, ValidationError

from mirror_worker.api import ConfigError


class KebabModel(BaseModel):
    """A spec mapping with kebab-case keys only; unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=lambda name: name.replace("_", "-"))

    @classmethod
    def parse(cls, raw: dict | None, where: str):
        try:
            return cls.model_validate(raw or {})
        except ValidationError as exc:
            raise ConfigError(validation_message(exc, where)) from None


def validation_message(exc: ValidationError, where: str, key_prefix: str = "") -> str:
    """The first problem of a kebab-case mapping as one line naming the key."""
    error = exc.errors()[0]
    key = ".".join(str(p) for p in error["loc"])
    message = "unknown key" if error["type"] == "extra_forbidden" else re.sub(r"^Value error, ", "", error["msg"])
    return f"{where}: {key_prefix}{key}: {message}" if key else f"{where}: {message}"
