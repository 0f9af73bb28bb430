"""Every Kafka client of the three planes (the worker, the Airflow tasks, the Spark jobs) is built here.

Callers hand over resolved settings (`client_config`: a source's consumer settings, the destination's
producer settings, an Airflow connection's, a Spark task's); this module decides what each kind of client
takes from them. An admin client and a side consumer (one that reads positions, syncs or offsets beside the
mirror) take only how to reach and authenticate to the cluster; the mirror's own consumers and producers
take their settings whole. librdkafka's own lines go to the `mirror_worker.librdkafka` logger, not stderr,
unless the caller passes its own `logger`. `overrides` (callbacks, a reader's options) win over both.
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from mirror_worker.clients.coordinator_admin import CoordinatorProcess, IsolatingAdmin
from mirror_worker.clients.fold import FoldRepeats
from mirror_worker.config.librdkafka import connection_settings
from mirror_worker.redaction import RedactingFilter

librdkafka_log = logging.getLogger("mirror_worker.librdkafka")
# Every client's librdkafka lines (the worker's, through clients/callbacks.py, and the hooks') are redacted
# here, as the project's own logs are: the handler that writes them may be Airflow's (issue 46: a secret
# client.id printed raw).
librdkafka_log.addFilter(RedactingFilter())
# A cluster that is down makes librdkafka log each reconnection: the first of a kind is kept, and one a minute.
librdkafka_log.addFilter(FoldRepeats())


def _with_log(settings: dict, overrides: dict | None) -> dict:
    return {"logger": librdkafka_log, **settings, **(overrides or {})}


def admin_client(settings: dict, overrides: dict | None = None, *, whole: bool = False) -> AdminClient:
    """An admin client of the cluster `settings` reach. `whole`: keep every setting (the worker's own
    admin clients carry its callbacks and its producer's timeouts), not only the connection's."""
    return AdminClient(_with_log(settings if whole else connection_settings(settings), overrides))


def worker_admin_client(settings: dict, what: str) -> IsolatingAdmin:
    """A long-running worker's admin client of a cluster (`settings` whole, with the worker's callbacks):
    its consumer-group calls run in a child process that a librdkafka abort kills alone
    (clients/coordinator_admin.py); `what` names the cluster in its errors."""
    return _isolating(admin_client(settings, whole=True), settings, what)


def group_admin_client(settings: dict, what: str) -> IsolatingAdmin:
    """An admin client (the connection only) whose consumer-group calls run in a child process, as the
    worker's do: the failover commands and tasks, which read and write groups on clusters that may be young
    or whose coordinator may be moving (clients/groups.py group_commits, clients/coordinator_admin.py)."""
    return _isolating(admin_client(settings), settings, what)


def _isolating(admin: AdminClient, settings: dict, what: str) -> IsolatingAdmin:
    plain = {k: v for k, v in connection_settings(settings).items() if isinstance(v, (str, int, float, bool))}
    return IsolatingAdmin(admin, CoordinatorProcess(plain, what))


def side_consumer(settings: dict, group_id: str, overrides: dict | None = None) -> Consumer:
    """A consumer beside the mirror: the connection only, its own group, never an automatic commit."""
    base = {**connection_settings(settings), "group.id": group_id, "enable.auto.commit": False}
    return Consumer(_with_log(base, overrides))


def consumer(settings: dict, overrides: dict | None = None) -> Consumer:
    """A consumer of exactly these settings (the mirror's source consumers, a Spark task's reader)."""
    return Consumer(_with_log(settings, overrides))


def producer(settings: dict, overrides: dict | None = None) -> Producer:
    """A producer of exactly these settings (the mirror's, a transactional one, a Spark task's)."""
    return Producer(_with_log(settings, overrides))
