"""What the benchmarks share: the local stack to measure on."""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path

from devstack import Stack, paths


@contextmanager
def bench_stack():
    """The running stack (`make stack-up`), or one started for this run and stopped after it."""
    stack = Stack(paths.default_stack_dir())
    if stack.is_up():
        yield stack
        return
    own = Stack(Path(tempfile.mkdtemp(prefix="bench-stack-")))
    own.up()
    try:
        yield own
    finally:
        own.down()
