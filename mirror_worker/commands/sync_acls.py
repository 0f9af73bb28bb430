"""`python -m mirror_worker sync-acls --config SPEC [--mirror NAME] [--dry-run]`: copy topic ACLs once.

The read-side ACLs of the topics the mirror selects now go to their destination topics (dr/acl_rules.py says
which). Prints one JSON document. Exit 0: done; 1: a cluster did not answer, has no authorizer, refused
to show its ACLs or refused a binding; 2: bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mirror_worker.commands.base import EXIT_BAD_INPUT, EXIT_FATAL, EXIT_OK, fail, subcommand_parser
from mirror_worker.exceptions import ConfigError, MirrorError


def add_parser(subparsers) -> None:
    parser = subcommand_parser(subparsers, "sync-acls",
                               "Copy the read-side ACLs of a mirror's topics to its destination topics.")
    parser.add_argument("--dry-run", action="store_true", help="report what would be created, create nothing")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from mirror_worker.config.spec import select_mirror
    from mirror_worker.dr.acl_admin import sync_mirror_acls

    try:
        config = select_mirror(Path(args.config), args.mirror)
    except ConfigError as exc:
        return fail(str(exc), EXIT_BAD_INPUT)
    try:
        reports = sync_mirror_acls(config, dry_run=args.dry_run, timeout=config.startup_timeout_s)
    except MirrorError as exc:
        return fail(str(exc), EXIT_FATAL)
    print(json.dumps({"mirror": config.name, "dry_run": args.dry_run, "sources": [r.to_dict() for r in reports]},
                     indent=2), flush=True)
    for report in reports:
        for acl, error in report.errors.items():
            fail(f"topic ACL not created on {acl.topic} for {acl.principal} ({acl.permission} {acl.operation}): "
                 f"{error}", EXIT_FATAL)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FATAL
