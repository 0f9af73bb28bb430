"""Static group membership without servers: the instance id per slot, stream and source, and its validation."""

import json
import logging
import sys
import threading

import pytest
from confluent_kafka import KafkaError

from mirror_worker.commands.cli import config_from_args, parse_args
from mirror_worker.config.membership import SLOT_ENV, instance_id, membership_settings, parse_slot
from mirror_worker.exceptions import ConfigError
from tests.unit.fakes import FakeError, FakeMessage, assign, make_worker

TP = ("t", 0)


@pytest.mark.parametrize("group, source, slot, stream, expected", [
    ("kafka-mirror.orders", "east", 0, 0, "kafka-mirror.orders.east.slot-0.stream-0"),
    ("kafka-mirror.orders", "west", 0, 0, "kafka-mirror.orders.west.slot-0.stream-0"),  # one id per source
    ("g", "source", 12, 3, "g.source.slot-12.stream-3"),
    ("g", "source", 1, 23, "g.source.slot-1.stream-23"),  # never the same as slot 12, stream 3
])
def test_instance_id_names_group_source_slot_and_stream(group, source, slot, stream, expected):
    assert instance_id(group, source, slot, stream) == expected
    assert membership_settings(True, group, source, slot, stream) == {"group.instance.id": expected}


def test_dynamic_membership_is_the_default_and_sets_no_id():
    assert membership_settings(False, "g", "east", 4, 1) == {}


@pytest.mark.parametrize("text, slot", [(None, None), ("", None), ("0", 0), ("17", 17), (" 3 ", 3)])
def test_slot_parsing(text, slot):
    assert parse_slot(text, "--worker.slot") == slot


@pytest.mark.parametrize("text", ["-1", "x", "1.5", "0x2", "\u0663"])
def test_a_bad_slot_is_an_error_naming_its_key(text):
    with pytest.raises(ConfigError, match=rf"^{SLOT_ENV}: a non-negative integer is expected, got "):
        parse_slot(text, SLOT_ENV)


@pytest.fixture
def flags(tmp_path):
    def make(*extra, consumer_text="bootstrap.servers=h:1\ngroup.id=g\n", name="source"):
        consumer = tmp_path / f"{name}.properties"
        consumer.write_text(consumer_text)
        producer = tmp_path / "dest.properties"
        producer.write_text("bootstrap.servers=h:2\n")
        return ["--consumer.config", str(consumer), "--producer.config", str(producer), "--whitelist", "t", *extra]
    return make


def test_flags_turn_static_membership_on_with_a_slot(flags, monkeypatch):
    monkeypatch.delenv(SLOT_ENV, raising=False)
    config = config_from_args(parse_args(flags()))
    assert (config.static_membership, config.worker_slot) == (False, 0)
    config = config_from_args(parse_args(flags("--static.membership", "--worker.slot", "4", "--num.streams", "2")))
    assert (config.static_membership, config.worker_slot) == (True, 4)


def test_the_slot_flag_wins_over_the_environment(flags, monkeypatch):
    monkeypatch.setenv(SLOT_ENV, "7")
    assert config_from_args(parse_args(flags("--static.membership"))).worker_slot == 7
    assert config_from_args(parse_args(flags("--static.membership", "--worker.slot=2"))).worker_slot == 2


def test_a_spec_mirror_takes_static_membership_and_the_slot_flag(tmp_path, monkeypatch):
    monkeypatch.delenv(SLOT_ENV, raising=False)
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"groups": [{
        "name": "g", "source": {"name": "east", "kafka": {"bootstrap.servers": "h:1"}},
        "destination": {"kafka": {"bootstrap.servers": "h:2"}},
        "mirrors": [{"name": "m", "whitelist": "t", "static-membership": True}],
    }]}))
    config = config_from_args(parse_args(["--config", str(spec), "--worker.slot", "5"]))
    assert (config.static_membership, config.worker_slot) == (True, 5)


@pytest.mark.parametrize("extra, consumer_text, name, error", [
    (["--worker.slot", "-1"], None, "source", "--worker.slot: a non-negative integer is expected, got '-1'"),
    (["--worker.slot", "one"], None, "source", "--worker.slot: a non-negative integer is expected, got 'one'"),
    ([], "bootstrap.servers=h:1\ngroup.instance.id=fixed\n", "source",
     "source 'source': group.instance.id is derived per worker slot and stream: set static-membership"),
    (["--static.membership"], None, "bad name", "group.instance.id 'g.bad name.slot-0.stream-0'"),
])
def test_bad_membership_input_exits_2_with_one_line(flags, capsys, monkeypatch, extra, consumer_text, name, error):
    from mirror_worker.__main__ import main

    monkeypatch.delenv(SLOT_ENV, raising=False)
    # main() configures logging onto capsys's stdout: later tests must not log into it once it is closed.
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    argv = flags(*extra, consumer_text=consumer_text or "bootstrap.servers=h:1\ngroup.id=g\n", name=name)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mirror_worker: ") and error in err and len(err.strip().splitlines()) == 1, err


def test_a_fenced_static_member_stops_the_worker_naming_its_id():
    """librdkafka hands FENCED_INSTANCE_ID to the consumer as a `_FATAL` error whose fatal() is false."""
    fenced = FakeError(KafkaError._FATAL, "Fatal error: Broker: Static consumer fenced by other consumer", fatal=False)
    worker, stream, consumer, producer = make_worker({TP: [FakeMessage("t", 0, 0, error=fenced)]})
    stream.instance_id = "g.src.slot-3.stream-0"
    assign(worker, stream, TP)
    worker._consume_round(0)
    assert worker.fatal == ("source 'src' consumer failed (static member g.src.slot-3.stream-0: is its worker slot "
                            "running twice?): Fatal error: Broker: Static consumer fenced by other consumer")
