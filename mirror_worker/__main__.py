"""`python -m mirror_worker` — MirrorMaker's flags, or `--config mirrors.yaml --mirror NAME`.

`python -m mirror_worker sync-schemas --config SPEC --mirror NAME [--topics a,b]` copies the schemas only.
`python -m mirror_worker translate-offsets --config SPEC --mirror NAME --group G [--apply]` translates a
source consumer group's offsets to the destination (failover).
"""

from __future__ import annotations

import sys

from mirror_worker.cli import config_from_args, parse_args
from mirror_worker.exceptions import ConfigError
from mirror_worker.logs import configure_logging
from mirror_worker.runner import EXIT_BAD_INPUT, fail, run_processes, run_worker


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sync-schemas"]:
        from mirror_worker.schema_sync import main as sync_schemas
        return sync_schemas(argv[1:])
    if argv[:1] == ["translate-offsets"]:
        from mirror_worker.offset_translation import main as translate_offsets
        return translate_offsets(argv[1:])
    try:
        config = config_from_args(parse_args(argv))
    except ConfigError as exc:
        return fail(str(exc), EXIT_BAD_INPUT)
    if config.process_count > 1:
        return run_processes(config)
    return run_worker(config)


if __name__ == "__main__":
    sys.exit(main())
