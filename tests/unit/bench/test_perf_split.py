"""bench/perf_split.py: perf script lines counted by kind of work and thread group."""

from __future__ import annotations

from bench.perf_split import kind, split, table, thread_group

LIB = "/x/site-packages/confluent_kafka.libs/librdkafka-0cb94173.so.1"
SCRIPT = f"""\
     rdk:broker1 10  7f0000000001 LZ4_compress_generic ({LIB})
     rdk:broker1 10  7f0000000002 LZ4_decompress_safe ({LIB})
     rdk:broker2 11  7f0000000003 rd_kafka_toppar_producer_serve ({LIB})
         python3 12  7f0000000004 _PyEval_EvalFrameDefault (/usr/bin/python3.11)
         python3 12  7f0000000005 Producer_produce (/x/confluent_kafka/cimpl.cpython-311-x86_64-linux-gnu.so)
         python3 12  7f0000000006 __memmove_avx_unaligned_erms (/usr/lib/x86_64-linux-gnu/libc.so.6)
        rdk:main 13  ffffffff81000007 do_syscall_64 ([kernel.kallsyms])
perf: a line that is no sample
"""


def test_samples_are_counted_by_kind_and_thread_group():
    result = split(SCRIPT)
    assert result.samples == 7
    assert result.kinds == {"LZ4 compression": 1, "LZ4 decompression": 1, "librdkafka (the rest)": 1,
                            "Python interpreter": 1, "confluent-kafka binding": 1, "memory copies": 1,
                            "kernel (sockets, polls, locks, scheduling)": 1}
    assert result.threads == {"librdkafka broker threads": 3, "Python threads (the worker's loop)": 3,
                              "librdkafka main and background threads": 1}


def test_kinds_by_symbol_before_library():
    assert kind("rd_kafka_lz4_decompress", LIB) == "LZ4 decompression"
    assert kind("XXH32_update", LIB) == "xxHash (LZ4 frame checksums)"
    assert kind("_int_free", "/usr/lib/x86_64-linux-gnu/libc.so.6") == "malloc / free"
    assert kind("rd_free", LIB) == "malloc / free"
    assert kind("[unknown]", "/usr/lib/x86_64-linux-gnu/libz.so.1") == "other"
    assert thread_group("rdk:bg") == "librdkafka main and background threads"


def test_the_table_scales_shares_to_cpu_seconds_per_million_records():
    text = table(split(SCRIPT), cpu_per_million=7.0)
    assert "| LZ4 compression | 14.3 % | 1.00 |" in text
    assert "| librdkafka broker threads | 42.9 % | 3.00 |" in text
