"""The command layer: exit codes, one-line errors and argument parsing of `python -m mirror_worker`.

Library modules never import this package (nor `commands/runner.py`, `commands/cli.py`, `__main__.py`); the commands
call the library and turn its exceptions into exit codes.

Exit codes: 0 done or clean stop (SIGTERM/SIGINT), 1 fatal runtime error, 2 bad input.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import tomllib
from pathlib import Path

from mirror_worker.exceptions import ConfigError
from mirror_worker.redaction import redact_text

EXIT_OK, EXIT_FATAL, EXIT_BAD_INPUT = 0, 1, 2

DISTRIBUTION = "kafka-mirror"  # pyproject.toml's [project] name
MODULE_COMMAND = "python -m mirror_worker"


def command_name(argv0: str | None = None) -> str:
    """The command as the user ran it, for usage lines: a console script by its own name (`kafka-mirror`,
    `kafka-mirror-sync-schemas`: pyproject.toml's [project.scripts]), `python -m mirror_worker` otherwise
    (argv[0] is then the path of `__main__.py`)."""
    name = os.path.basename(sys.argv[0] if argv0 is None else argv0)
    return MODULE_COMMAND if not name or name == "-c" or name.endswith(".py") else name


def package_version() -> str:
    """The installed distribution's version; in a source checkout that is not installed, its pyproject.toml's,
    marked so (a checkout may hold changes the version number does not tell)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        with open(Path(__file__).resolve().parents[2] / "pyproject.toml", "rb") as project:
            return f"{tomllib.load(project)['project']['version']} (source checkout, not installed)"
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def fail(message: str, code: int) -> int:
    """One line on stderr (secrets redacted), one per line of `message` (several problems, e.g. one per
    unreachable cluster); returns `code`."""
    lines = message.splitlines() or [""]
    print(redact_text("\n".join(f"mirror_worker: {line}" for line in lines)), file=sys.stderr, flush=True)
    return code


class OneLineParser(argparse.ArgumentParser):
    """argparse that raises ConfigError (one line, exit 2) instead of printing usage."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        raise ConfigError(message)


def subcommand_parser(subparsers, name: str, description: str) -> argparse.ArgumentParser:
    """A subcommand over one mirror of a YAML spec: its parser with --config and --mirror."""
    # Named after the parent's prog (the command as run, see command_name) and `name`, by argparse.
    parser = subparsers.add_parser(name, allow_abbrev=False, description=description)
    parser.add_argument("--config", required=True, metavar="SPEC", help="YAML mirror spec")
    parser.add_argument("--mirror", metavar="NAME", help="the mirror (required when the spec has several)")
    return parser
