"""The brokers' JVM flags: the serial collector unless a node asks for Kafka's own (G1, the whole heap at start)."""

from __future__ import annotations

import pytest

from devstack import kafka, paths
from devstack.kafka import KafkaNode


def _argv(monkeypatch, tmp_path, **fields) -> list[str]:
    libs = tmp_path / "libs"
    libs.mkdir(parents=True)
    (libs / "kafka_2.13-4.0.0.jar").touch()
    monkeypatch.setattr(paths, "KAFKA_LIBS", libs)
    monkeypatch.setattr(kafka, "find_java", lambda _version: "java")
    return KafkaNode("source", tmp_path / "node", heap_mb=768, **fields)._java_argv("kafka.Kafka")


def test_the_default_is_the_serial_collector_with_a_small_initial_heap(monkeypatch, tmp_path):
    argv = _argv(monkeypatch, tmp_path)
    assert "-XX:+UseSerialGC" in argv and "-Xms64m" in argv and "-Xmx768m" in argv
    assert not any("G1" in flag for flag in argv)


def test_g1_takes_kafkas_start_script_flags(monkeypatch, tmp_path):
    argv = _argv(monkeypatch, tmp_path, gc="g1")
    assert {"-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Xms768m", "-Xmx768m"} <= set(argv)
    assert "-XX:+UseSerialGC" not in argv and "-Xms64m" not in argv


def test_the_client_compiler_only_when_asked(monkeypatch, tmp_path):
    assert "-XX:TieredStopAtLevel=1" not in _argv(monkeypatch, tmp_path / "a")  # benchmarks, make run: both
    assert "-XX:TieredStopAtLevel=1" in _argv(monkeypatch, tmp_path / "b", jit="c1")  # the test clusters
    with pytest.raises(KeyError):
        _argv(monkeypatch, tmp_path / "c", jit="fast")
