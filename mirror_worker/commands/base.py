"""The command layer: exit codes, one-line errors and argument parsing of `python -m mirror_worker`.

Library modules never import this package (nor `commands/runner.py`, `commands/cli.py`, `__main__.py`); the commands
call the library and turn its exceptions into exit codes.

Exit codes: 0 done or clean stop (SIGTERM/SIGINT), 1 fatal runtime error, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys

from mirror_worker.exceptions import ConfigError
from mirror_worker.redaction import redact_text

EXIT_OK, EXIT_FATAL, EXIT_BAD_INPUT = 0, 1, 2


def fail(message: str, code: int) -> int:
    """One line on stderr (secrets redacted); returns `code`."""
    print(redact_text(f"mirror_worker: {message}"), file=sys.stderr, flush=True)
    return code


class OneLineParser(argparse.ArgumentParser):
    """argparse that raises ConfigError (one line, exit 2) instead of printing usage."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        raise ConfigError(message)


def subcommand_parser(subparsers, name: str, description: str) -> argparse.ArgumentParser:
    """A subcommand over one mirror of a YAML spec: its parser with --config and --mirror."""
    parser = subparsers.add_parser(name, prog=f"python -m mirror_worker {name}", allow_abbrev=False,
                                   description=description)
    parser.add_argument("--config", required=True, metavar="SPEC", help="YAML mirror spec")
    parser.add_argument("--mirror", metavar="NAME", help="the mirror (required when the spec has several)")
    return parser
