"""`python -m mirror_worker sync-schemas --config SPEC [--mirror NAME] [--topics a,b]`: copy the schemas only.

Exit 0: every subject synced; 1: conflicts (one line each on stderr) or a registry failed; 2: bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mirror_worker.commands.base import EXIT_BAD_INPUT, EXIT_FATAL, EXIT_OK, fail, subcommand_parser
from mirror_worker.exceptions import ConfigError, MirrorError


def add_parser(subparsers) -> None:
    parser = subcommand_parser(subparsers, "sync-schemas", "Copy a mirror's schema subjects to its destination registry.")
    parser.add_argument("--topics", metavar="A,B", help="source topics (default: all the mirror selects)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from mirror_worker.config.spec import select_mirror
    from mirror_worker.schemas.sync import sync_mirror_schemas

    try:
        config = select_mirror(Path(args.config), args.mirror)
        topics = [t for t in args.topics.split(",") if t] if args.topics is not None else None
        if topics == []:
            raise ConfigError("--topics: at least one topic name is required")
        report = sync_mirror_schemas(config, topics)
    except ConfigError as exc:
        return fail(str(exc), EXIT_BAD_INPUT)
    except MirrorError as exc:
        return fail(str(exc), EXIT_FATAL)
    print(json.dumps(report.to_dict()), flush=True)
    for error in report.conflicts.values():
        print(f"mirror_worker: {error}", file=sys.stderr, flush=True)
    return EXIT_OK if report.ok else EXIT_FATAL
