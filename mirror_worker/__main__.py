"""`python -m mirror_worker` — MirrorMaker's flags, or `--config mirrors.yaml --mirror NAME`.

`python -m mirror_worker sync-schemas --config SPEC --mirror NAME [--topics a,b]` copies the schemas only.
`python -m mirror_worker translate-offsets --config SPEC --mirror NAME --group G [--apply]` translates a
source consumer group's offsets to the destination (failover).
`python -m mirror_worker sync-acls --config SPEC --mirror NAME [--dry-run]` copies the read-side topic ACLs once.
The commands live in commands/.
"""

from __future__ import annotations

import sys

from mirror_worker.commands.main import main

if __name__ == "__main__":
    sys.exit(main())
