"""`python -m mirror_worker translate-offsets --config SPEC --mirror NAME --group G [--source ALIAS] [--apply [--rewind]]`.

Translates a source consumer group's offsets to the destination (failover), see dr/offset_translation.py.
Exit codes: 0 done, 1 runtime error (group active, cluster unreachable), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from confluent_kafka import KafkaException

from mirror_worker.commands.base import EXIT_BAD_INPUT, EXIT_FATAL, EXIT_OK, fail, subcommand_parser
from mirror_worker.exceptions import ConfigError, MirrorError


def add_parser(subparsers) -> None:
    parser = subcommand_parser(subparsers, "translate-offsets",
                               "Destination offsets a source consumer group resumes from after failover.")
    parser.add_argument("--group", required=True, metavar="GROUP", help="the consumer group to translate")
    parser.add_argument("--source", metavar="ALIAS", help="source cluster (when the mirror has several)")
    parser.add_argument("--apply", action="store_true",
                        help="write the offsets to GROUP on the destination (only when it has no active member)")
    parser.add_argument("--rewind", action="store_true",
                        help="with --apply: also move GROUP back where its destination offset is ahead of the translation "
                             "(it consumed there since an earlier failover and reads those records again; the report "
                             "lists each partition). Without it such partitions are left where they are")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from mirror_worker.config.spec import select_mirror
    from mirror_worker.dr import offset_translation as translation

    try:
        if not args.group.strip():
            raise ConfigError("--group: must not be empty")
        if args.rewind and not args.apply:
            raise ConfigError("--rewind: only with --apply")
        config = select_mirror(Path(args.config), args.mirror)
        source = translation.source_cluster(config, args.source)
    except ConfigError as exc:
        return fail(str(exc), EXIT_BAD_INPUT)
    try:
        translations = translation.translate_group(config, args.group, args.source)
        if not translations:  # a misspelt group, or the wrong mirror: an empty plan would pass for a done failover
            return fail(f"group {args.group!r} has no committed offsets on source {source.name!r} for the topics "
                        f"mirror {config.name!r} replicates: nothing to translate", EXIT_FATAL)
        behind = {}
        if args.apply:
            behind = translation.apply_group_offsets(config, args.group, translation.translated_offsets(translations),
                                                     config.startup_timeout_s, rewind=args.rewind)
    except (MirrorError, KafkaException) as exc:
        return fail(str(exc), EXIT_FATAL)
    print(json.dumps(translation.report(config, args.group, translations, args.apply, behind, args.rewind), indent=2),
          flush=True)
    return EXIT_OK
