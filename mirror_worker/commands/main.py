"""`python -m mirror_worker`: the worker with MirrorMaker's classic flags (commands/cli.py) or a YAML spec, and the
subcommands `sync-schemas`, `translate-offsets`, `sync-acls` and `sync-group-offsets` (argparse subparsers, one module each).

argparse (3.11) has no default subcommand, and a parser holding both the classic flags and the
subparsers would take a stray value (`--num.stream 2`) as a command name and change the pinned
one-line errors: so a first word naming a subcommand goes to the subcommand parser, anything else
to the classic flags.
"""

from __future__ import annotations

import sys

from mirror_worker.commands import sync_acls, sync_group_offsets, sync_schemas, translate_offsets
from mirror_worker.commands.base import DISTRIBUTION, EXIT_BAD_INPUT, MODULE_COMMAND, OneLineParser, command_name, fail
from mirror_worker.exceptions import ConfigError
from mirror_worker.logs import configure_logging


def subcommand_parser(prog: str = MODULE_COMMAND) -> tuple[OneLineParser, set[str]]:
    """The subcommands' parser and their names; `prog`: the command as run (base.command_name)."""
    parser = OneLineParser(prog=prog, allow_abbrev=False)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in (sync_schemas, translate_offsets, sync_acls, sync_group_offsets):
        command.add_parser(subparsers)
    if prog.startswith(f"{DISTRIBUTION}-"):  # run as its own console script, `kafka-mirror-sync-schemas`
        for name, sub in subparsers.choices.items():
            if prog == f"{DISTRIBUTION}-{name}":
                sub.prog = prog
    return parser, set(subparsers.choices)


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    argv = sys.argv[1:] if argv is None else argv
    prog = command_name()
    parser, commands = subcommand_parser(prog)
    if argv and argv[0] in commands:
        try:
            args = parser.parse_args(argv)
        except ConfigError as exc:
            return fail(str(exc), EXIT_BAD_INPUT)
        return args.run(args)
    return run_mirror(argv, prog)


def run_mirror(argv: list[str], prog: str = MODULE_COMMAND) -> int:
    """The worker: classic flags or `--config SPEC --mirror NAME`; one process or --num.streams processes."""
    from mirror_worker.commands.cli import config_from_args, parse_args
    from mirror_worker.commands.runner import run_processes, run_worker

    try:
        config = config_from_args(parse_args(argv, prog))
    except ConfigError as exc:
        return fail(str(exc), EXIT_BAD_INPUT)
    if config.process_count > 1:
        return run_processes(config)
    return run_worker(config)


def _subcommand_entry(name: str):
    """The console script `kafka-mirror-NAME` (pyproject.toml): `python -m mirror_worker NAME ...`."""
    return lambda: main([name, *sys.argv[1:]])


sync_schemas_main = _subcommand_entry("sync-schemas")
translate_offsets_main = _subcommand_entry("translate-offsets")
sync_acls_main = _subcommand_entry("sync-acls")
sync_group_offsets_main = _subcommand_entry("sync-group-offsets")
