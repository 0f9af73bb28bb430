"""The offset translation's lines (`translate-offsets`, and the failover's tasks that translate), each made by a
scene over fakes of the destination for test_troubleshooting.py, printed as the subcommand prints a failure
(exit 1)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from unittest import mock

from tests.unit.troubleshooting_cases import case, with_mirror_keys
from tests.unit.troubleshooting_cases_runtime import worker

SPEC_PRESERVING = with_mirror_keys("preserve-partitions: true")


def mirror():
    """The mirror `orders` of the page's spec, with preserve-partitions (offset translation needs it)."""
    from mirror_worker.batch_api import select_mirror

    Path("spec.yaml").write_text(SPEC_PRESERVING)
    return select_mirror(Path("spec.yaml"), "orders")


def no_offset_syncs() -> int:
    """The destination has no offset-syncs topic of the mirror (it never ran with preserve-partitions)."""
    from mirror_worker.dr import offset_translation

    consumer = SimpleNamespace(list_topics=lambda topic, timeout: SimpleNamespace(topics={}), close=lambda: None)
    with mock.patch.object(offset_translation.factory, "side_consumer", lambda *args: consumer):
        return worker(lambda: offset_translation.read_offset_syncs(mirror(), 1))


def group_active_on_destination() -> int:
    """`--apply` while two consumers of the group already run on the destination."""
    from mirror_worker.dr import offset_translation
    from tests.unit.fakes import FakeAdmin

    with mock.patch.object(offset_translation, "_admin", lambda settings, what="": FakeAdmin(group_members={"app": 2})):
        return worker(lambda: offset_translation.apply_group_offsets(mirror(), "app", {("orders", 0): 5}, 1))


CASES = {
    "mirror_worker: no offset-syncs topic … on the destination: has mirror … run with preserve-partitions?": case(
        no_offset_syncs, exit_code=1),
    "mirror_worker: destination group … has … active member(s): stop its consumers before applying translated "
    "offsets": case(group_active_on_destination, exit_code=1),
}
