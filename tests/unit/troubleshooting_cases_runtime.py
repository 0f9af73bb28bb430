"""The lines printed while things run, not on bad input: the worker's, each made by a scene over the fakes of
tests/unit/fakes.py (a scene prints what the user reads and returns the page's exit column), and the subcommands'
when a cluster does not answer, for test_troubleshooting.py."""

from __future__ import annotations

import sys
import tempfile
import threading
from types import SimpleNamespace
from unittest import mock

from tests.unit.troubleshooting_cases import SOURCE, SPEC_FLAGS, WORKER, case, with_mirror_keys, with_registry

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
    from mirror_worker.commands.main import main

    with mock.patch("mirror_worker.dr.offset_translation.committed_source_offsets", return_value={}):
        return main(list(argv))


def worker(failing) -> int:
    """`failing()` raises what a running worker stops on: its line and exit code as commands/runner.py gives them
    (bad input 2, a failure 1)."""
    from mirror_worker.commands.base import fail
    from mirror_worker.exceptions import ConfigError, MirrorError

    try:
        failing()
    except ConfigError as exc:
        return fail(str(exc), 2)
    except MirrorError as exc:
        return fail(str(exc), 1)
    return 0


def same_cluster(whitelist: str, prefix: str) -> int:
    """A mirror whose source and destination are one cluster selects topic `orders` (its topic refresh)."""
    from mirror_worker.config.model import naming_policy_of
    from mirror_worker.policy.filter import TopicFilter
    from mirror_worker.policy.naming import check_mapping

    return worker(lambda: check_mapping(["orders"], naming_policy_of(prefix or None, {}),
                                        TopicFilter.from_expressions(whitelist, None), True))


def no_way_back() -> int:
    """A failback mirror meets a topic its forward mirror (prefix `east.`) did not name."""
    from mirror_worker.policy.naming import InversePolicy, PrefixPolicy

    return worker(lambda: InversePolicy(PrefixPolicy("east.")).remote_topic("orders"))


def destination_too_small() -> int:
    """preserve-partitions: source orders has 6 partitions, the existing destination topic 3."""
    from mirror_worker.engine.topic_management import TopicManagement
    from mirror_worker.policy.naming import IdentityPolicy

    manager = SimpleNamespace(config=SimpleNamespace(preserve_partitions=True, exactly_once=False),
                              router=SimpleNamespace(policy=IdentityPolicy()))
    return worker(lambda: TopicManagement._check_partition_room(
        manager, {"orders": SimpleNamespace(partitions=6)}, {"orders": 3}))


def destination_topic_refused() -> str:
    """The destination refused to create orders' topic: the topic is left out, the others mirrored."""
    from mirror_worker.engine.topic_management import TopicManagement

    manager = SimpleNamespace(not_mirrored={}, metrics=mock.MagicMock(), label={"mirror": "orders"})
    TopicManagement._note_creation(manager, SimpleNamespace(alias="east"), "orders",
                                   "Broker: Topic authorization failed")
    return GOES_ON


def credentials_refused() -> int:
    """The destination answers but refuses the worker's SASL credentials (its clients' error callback says)."""
    from confluent_kafka import KafkaError, KafkaException

    from mirror_worker.clients.first_contact import Probe, first_contact

    def list_topics(timeout):
        raise KafkaException(KafkaError(KafkaError._AUTHENTICATION, "Authentication failed"))

    client = SimpleNamespace(list_topics=list_topics, poll=lambda timeout: None)
    return worker(lambda: first_contact([Probe(client, "destination", "destination")], 5, lambda cluster: (
        "SASL authentication error: Authentication failed during authentication due to invalid credentials with "
        "SASL mechanism SCRAM-SHA-512"), lambda: False))


REGISTRY = 'schema-registry-url: "http://127.0.0.1:1"'
REGISTRIES = with_registry("destination", REGISTRY).replace(SOURCE, SOURCE[:-1] + f", {REGISTRY}}}")


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
    "mirror_worker: … schema registry unreachable: …": case(
        WORKER, "sync-schemas", *SPEC_FLAGS, "--topics", "orders", exit_code=1, spec_yaml=REGISTRIES),
    # the worker at run time: its topic refresh, and the clusters at start-up
    "mirror_worker: mirror would write topic … into itself (source and destination are the same cluster)": case(
        same_cluster, "orders", ""),
    "mirror_worker: mirror would form a cycle: … -> …, which the topic filter selects again on the same cluster": case(
        same_cluster, "orders.*", "orders."),
    "mirror_worker: topic … is not one the forward mirror names: it has no way back": case(no_way_back),
    "mirror_worker: destination topic … has … partitions, fewer than source …'s …: … needs a destination partition "
    "per source partition": case(destination_too_small, exit_code=1),
    "mirror_worker: topic … of source … not mirrored (tried again at each topic refresh): …": case(
        destination_topic_refused, exit_code=GOES_ON),
    "mirror_worker: … cluster refused the connection: …": case(credentials_refused),
}
