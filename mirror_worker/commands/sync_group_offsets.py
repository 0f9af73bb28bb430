"""`python -m mirror_worker sync-group-offsets --config SPEC [--mirror NAME] [--dry-run]`: sync group offsets once.

The mirror's chosen source groups get their translated offsets on the destination, forward only and only
where the destination group has no member (dr/group_rules.py says which). Prints one JSON document. Exit 0:
done (skipped partitions are reported, not errors); 1: a cluster did not answer or refused a write; 2: bad
input (a spec without preserve-partitions included).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from confluent_kafka import KafkaException

from mirror_worker.commands.base import EXIT_BAD_INPUT, EXIT_FATAL, EXIT_OK, fail, subcommand_parser
from mirror_worker.exceptions import ConfigError, MirrorError


def add_parser(subparsers) -> None:
    parser = subcommand_parser(subparsers, "sync-group-offsets",
                               "Write the translated offsets of a mirror's chosen consumer groups to the destination.")
    parser.add_argument("--dry-run", action="store_true", help="report what would be written, write nothing")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from mirror_worker.config.spec import select_mirror
    from mirror_worker.dr.group_admin import sync_mirror_group_offsets
    from mirror_worker.dr.offset_translation import source_cluster

    try:
        config = select_mirror(Path(args.config), args.mirror)
        source_cluster(config, config.sources[0].name)  # preserve-partitions, or a one-line refusal
    except ConfigError as exc:
        return fail(str(exc), EXIT_BAD_INPUT)
    try:
        reports = sync_mirror_group_offsets(config, dry_run=args.dry_run)
    except (MirrorError, KafkaException) as exc:
        return fail(str(exc), EXIT_FATAL)
    print(json.dumps({"mirror": config.name, "dry_run": args.dry_run, "sources": [r.to_dict() for r in reports]},
                     indent=2), flush=True)
    for report in reports:
        for group, error in report.errors.items():
            fail(f"source {report.source!r}: {'groups not listed' if group == '*' else f'group {group!r}'}: {error}",
                 EXIT_FATAL)
        for plan in report.groups:
            if plan.error:
                fail(f"group {plan.group!r}: {plan.error}", EXIT_FATAL)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FATAL
