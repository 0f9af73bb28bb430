"""Write a record whose header name is not UTF-8, as sarama, franz-go or kcat may.

confluent-kafka's Python `Producer.produce` cannot: it turns a bytes header name into its `str()` ("b'\\xff'").
librdkafka's C API takes a header name as bytes, so this calls it through ctypes, in the copy of librdkafka
that the confluent-kafka wheel bundles (rdkafka.h's `rd_kafka_producev` with RD_KAFKA_V_HEADER).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import confluent_kafka

# rd_kafka_vtype_t (rdkafka.h)
_END, _TOPIC, _PARTITION, _VALUE, _MSGFLAGS, _HEADER = 0, 1, 3, 4, 7, 9
_MSG_F_COPY = 2
_PRODUCER = 0


@functools.cache
def _librdkafka() -> ctypes.CDLL:
    libs = Path(confluent_kafka.__file__).resolve().parents[1] / "confluent_kafka.libs"
    lib = ctypes.CDLL(str(next(libs.glob("librdkafka*.so*"))))
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_producev.restype = ctypes.c_int  # variadic: every argument is passed typed below
    lib.rd_kafka_flush.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_err2str.restype = ctypes.c_char_p
    lib.rd_kafka_err2str.argtypes = [ctypes.c_int]
    return lib


def produce_with_header_name(bootstrap: str, topic: str, partition: int, value: bytes, header_name: bytes,
                             header_value: bytes = b"v") -> None:
    """One record, acknowledged by the broker, with one header whose name is `header_name` (no NUL in it)."""
    lib = _librdkafka()
    error = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    for key, setting in ((b"bootstrap.servers", bootstrap.encode()), (b"acks", b"all")):
        if lib.rd_kafka_conf_set(conf, key, setting, error, len(error)) != 0:
            raise RuntimeError(error.value.decode())
    rk = lib.rd_kafka_new(_PRODUCER, conf, error, len(error))
    if not rk:
        raise RuntimeError(error.value.decode())
    try:
        rc = lib.rd_kafka_producev(
            ctypes.c_void_p(rk),
            ctypes.c_int(_TOPIC), ctypes.c_char_p(topic.encode()),
            ctypes.c_int(_PARTITION), ctypes.c_int32(partition),
            ctypes.c_int(_VALUE), ctypes.c_char_p(value), ctypes.c_size_t(len(value)),
            ctypes.c_int(_MSGFLAGS), ctypes.c_int(_MSG_F_COPY),
            ctypes.c_int(_HEADER), ctypes.c_char_p(header_name), ctypes.c_char_p(header_value),
            ctypes.c_ssize_t(len(header_value)),
            ctypes.c_int(_END))
        if rc != 0:
            raise RuntimeError(lib.rd_kafka_err2str(rc).decode())
        if lib.rd_kafka_flush(ctypes.c_void_p(rk), 30_000) != 0:
            raise RuntimeError(f"record to {topic}[{partition}] not delivered in 30 s")
    finally:
        lib.rd_kafka_destroy(ctypes.c_void_p(rk))
