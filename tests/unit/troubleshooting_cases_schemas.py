"""The schema registries' answers as the worker, `sync-schemas` and the Airflow schema task meet them, each made by
a scene for test_troubleshooting.py: the mirror `orders` with a source registry (127.0.0.1:1) and a destination one
(127.0.0.1:2), whose HTTP client answers as a RegistryAnswers says (no server)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

from tests.unit.troubleshooting_cases import SOURCE, case, with_registry
from tests.unit.troubleshooting_cases_airflow import TASK_RETRIED
from tests.unit.troubleshooting_cases_runtime import GOES_ON

SPEC_REGISTRIES = with_registry("destination", 'schema-registry-url: "http://127.0.0.1:2"').replace(
    SOURCE, SOURCE[:-1] + ', schema-registry-url: "http://127.0.0.1:1"}')
ERRORS = {404: (40401, "Subject not found"), 500: (50001, "Error in the backend data store"),
          409: (409, "Schema being registered is incompatible with an earlier schema")}
SCHEMA = '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}'


class RegistryAnswers:
    """A SchemaRegistryClient whose calls answer from `answers` (method name -> the value, or an HTTP status it
    raises as the client does); a call not named answers 404."""

    def __init__(self, **answers) -> None:
        self.answers = answers

    def __getattr__(self, name: str):
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        answer = self.answers.get(name, 404)

        def call(*args, **kwargs):
            if isinstance(answer, int):
                raise SchemaRegistryError(answer, *ERRORS[answer])
            return answer
        return call


def registries(source: RegistryAnswers, destination: RegistryAnswers | None = None):
    """The registry clients the mirror's code makes: `source` for 127.0.0.1:1, `destination` for 127.0.0.1:2."""
    clients = {"http://127.0.0.1:1": source, "http://127.0.0.1:2": destination or RegistryAnswers()}
    return mock.patch("mirror_worker.schemas.registry.SchemaRegistryClient", lambda config: clients[config["url"]])


def order_subject() -> RegistryAnswers:
    """A source registry with subject orders-value, version 1 (schema id 7)."""
    from confluent_kafka.schema_registry import Schema

    return RegistryAnswers(get_versions=[1], get_version=SimpleNamespace(version=1, schema_id=7,
                                                                         schema=Schema(SCHEMA, "AVRO")))


def gate(source: RegistryAnswers, destination: RegistryAnswers | None = None):
    """The worker's schema gate of source east, its partition orders[0] assigned."""
    from mirror_worker.batch_api import select_mirror
    from mirror_worker.engine.halts import Halts
    from mirror_worker.engine.schema_gate import SchemaGate
    from mirror_worker.metrics import MirrorMetrics
    from mirror_worker.schemas.sync import syncers_for

    Path("spec.yaml").write_text(SPEC_REGISTRIES)
    with registries(source, destination):
        syncer = syncers_for(select_mirror(Path("spec.yaml"), "orders"))["east"]
    metrics = MirrorMetrics("orders")
    stream = SimpleNamespace(alias="east", assigned={("orders", 0)}, consumer=SimpleNamespace(pause=lambda tps: None),
                             ledger=SimpleNamespace(halt=lambda *args: None, halted=set(), position=lambda key: 5))
    return SchemaGate(syncer, Halts(metrics, {"mirror": "orders"}, None, lambda topic, partition: 0), metrics,
                      {"mirror": "orders"}, "east"), stream


def unknown_id(answer: str) -> str:
    """A record of orders[0] at offset 5 framed with schema id 7, which the source registry does not know (404), or
    knows under no subject (its versions: none)."""
    from mirror_worker.schemas import wire_format
    from tests.unit.fakes import FakeMessage

    schema_gate, stream = gate(RegistryAnswers(get_schema_versions=[] if answer == "no-subject" else 404))
    schema_gate.new_schema_ids(stream, FakeMessage("orders", 0, 5, value=wire_format.header(7) + b"body"))
    return GOES_ON


def conflict() -> str:
    """Topic orders is newly mirrored: the destination registry refuses its value subject (HTTP 409)."""
    schema_gate, stream = gate(order_subject(), RegistryAnswers(register_schema=409))
    schema_gate.sync_topics(stream, ["orders"])
    return GOES_ON


def registry_fails(*argv: str) -> int:
    """`sync-schemas`: the source registry answers HTTP 500 (its backend store failing)."""
    from mirror_worker.commands.main import main

    Path("spec.yaml").write_text(SPEC_REGISTRIES)
    with registries(RegistryAnswers(get_versions=500)):
        return main(list(argv))


def airflow_conflict() -> str:
    """The mirror's sync_schemas task (schema-sync strict, the default) over the conflict above."""
    from mirror_airflow.operators.schemas import SyncSchemasOperator

    Path("spec.yaml").write_text(SPEC_REGISTRIES)
    operator = SyncSchemasOperator(task_id="sync_schemas", spec_path="spec.yaml", mirror_name="orders")
    context = {"ti": SimpleNamespace(xcom_pull=lambda task_ids: {"orders": None})}
    with registries(order_subject(), RegistryAnswers(register_schema=409)):
        try:
            operator.execute(context)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
    return TASK_RETRIED


CASES = {
    "mirror_worker: partition …[…] of source … halted at offset …: unknown schema: schema id … is not in the … "
    "registry": case(unknown_id, "404", exit_code=GOES_ON),
    "mirror_worker: partition …[…] of source … halted at offset …: unknown schema: schema id … is in no subject of "
    "the … registry": case(unknown_id, "no-subject", exit_code=GOES_ON),
    "mirror_worker: schema conflict on topic …: … (source …; the topic is not mirrored)": case(
        conflict, exit_code=GOES_ON),
    "mirror_worker: … schema registry: …": case(registry_fails, "sync-schemas", "--config", "spec.yaml", "--topics",
                                               "orders", exit_code=1),
    "mirror …: schema conflicts on … topic(s), first …: …": case(airflow_conflict, exit_code=TASK_RETRIED),
}
