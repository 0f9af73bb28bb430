"""The lines printed while things run, not on bad input: the worker's, each made by a scene over the fakes of
tests/unit/fakes.py (a scene prints what the user reads and returns the page's exit column), and the subcommands'
when a cluster does not answer, for test_troubleshooting.py."""

from __future__ import annotations

import sys
import tempfile
import threading

from tests.unit.troubleshooting_cases import SPEC_FLAGS, WORKER, case, with_mirror_keys

GOES_ON = "none: the worker goes on"


def data_lost_before_mirrored() -> str:
    """The group committed offset 2 of t[0], whose records before 5 were deleted since: the partition halts."""
    from tests.unit.fakes import assign, make_worker, records

    worker, stream, _, _ = make_worker({("t", 0): records("t", 0, range(5, 8))}, low={("t", 0): 5},
                                       committed={("t", 0): (2, "id-t")})
    assign(worker, stream, ("t", 0))
    return GOES_ON


def stuck_shutdown() -> str:
    """A close that does not return within its bound (a cluster that stopped answering)."""
    from mirror_worker.commands.runner import close_within

    release, captured = threading.Event(), sys.stderr
    with tempfile.TemporaryFile("w+") as stderr:  # the stacks it dumps need a file with a descriptor
        sys.stderr = stderr
        try:
            close_within(lambda: release.wait(30), 0.1, "m")
        finally:
            sys.stderr = captured
            release.set()
        stderr.seek(0)
        captured.write(stderr.read())
    return "0, or the failure's code"


def group_without_commits(*argv: str) -> int:
    """translate-offsets of a group that committed nothing on the topics the mirror replicates: the group read
    answers empty (faked here; on the real stack: test_offset_translation.py, a young source)."""
    from unittest import mock

    from mirror_worker.commands.main import main

    with mock.patch("mirror_worker.dr.offset_translation.committed_source_offsets", return_value={}):
        return main(list(argv))


CASES = {
    # the worker at run time
    "mirror_worker: data loss on source …: …; …": case(data_lost_before_mirrored, exit_code=GOES_ON),
    "mirror_worker: partition …[…] of source … halted at offset …: …": case(data_lost_before_mirrored,
                                                                          exit_code=GOES_ON),
    "mirror_worker: shutdown did not finish within …s (a cluster unreachable?): exiting without the final commit; "
    "what it held is mirrored again after a restart": case(stuck_shutdown, exit_code="0, or the failure's code"),
    # the subcommands against clusters that do not answer
    "mirror_worker: source …: topics not listed: …": case(WORKER, "sync-acls", *SPEC_FLAGS, exit_code=1),
    "mirror_worker: cannot reach source …: …": case(WORKER, "sync-group-offsets", *SPEC_FLAGS, exit_code=1,
                                                    spec_yaml=with_mirror_keys("preserve-partitions: true")),
    # within the spec's startup-timeout-s (1 s; a fixed 30 s before)
    "mirror_worker: cannot read group … on …: …": case(
        WORKER, "translate-offsets", *SPEC_FLAGS, "--group", "g", exit_code=1,
        spec_yaml=with_mirror_keys("preserve-partitions: true")),
    "mirror_worker: group … has no committed offsets on source … for the topics mirror … replicates: nothing to "
    "translate": case(group_without_commits, "translate-offsets", *SPEC_FLAGS, "--group", "g", exit_code=1,
                      spec_yaml=with_mirror_keys("preserve-partitions: true")),
}
