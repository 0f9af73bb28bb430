"""Structured logs: one JSON object per line on stdout (stderr carries only one-line errors), `extra={...}` fields included."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import traceback

from mirror_worker.redaction import redact_text

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process,
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return redact_text(json.dumps(entry, default=str))


def _redacted_excepthook(exc_type, exc, tb) -> None:
    sys.stderr.write(redact_text("".join(traceback.format_exception(exc_type, exc, tb))))


def _redacted_thread_excepthook(args) -> None:
    if args.exc_type is not SystemExit:
        _redacted_excepthook(args.exc_type, args.exc_value, args.exc_traceback)


def configure_logging(level: str | None = None, stream=None) -> None:
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level or os.environ.get("MIRROR_LOG_LEVEL", "INFO"))
    # An unexpected traceback is printed through the same redaction as the logs.
    sys.excepthook = _redacted_excepthook
    threading.excepthook = _redacted_thread_excepthook
