"""Where a process's CPU goes, by native symbol: `perf record` on a running process samples every thread of it,
librdkafka's included (py-spy sees only the Python ones), and each sample is put in a kind of work (LZ4, copies,
the kernel, the interpreter...) by its symbol and library. bench.profile_worker --perf scales the shares to
CPU-seconds per million records copied.

perf samples a thread only while it runs, so a kind's share of the samples is its share of the CPU time."""

from __future__ import annotations

import collections
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# (kind, symbol pattern, library pattern): the first that matches a sample names its kind. The LZ4 frame's checksum
# (xxHash) is LZ4's work too, but kept apart: it is the part a codec change would not save.
KINDS: list[tuple[str, str | None, str | None]] = [
    ("LZ4 decompression", r"LZ4.*decompress", None),
    ("LZ4 compression", r"LZ4", None),
    ("xxHash (LZ4 frame checksums)", r"XXH", None),
    ("CRC32C (record batches)", r"crc32c", None),
    ("memory copies", r"mem(cpy|move)", None),
    ("malloc / free", r"(^|_)(malloc|free|realloc|calloc|cfree)|_int_|tcache|arena|consolidate", None),
    ("kernel (sockets, polls, locks, scheduling)", None, r"^\[kernel"),
    ("confluent-kafka binding", None, r"cimpl"),  # before the interpreter: its name holds "cpython"
    ("Python interpreter", None, r"python"),
    ("librdkafka (the rest)", None, r"librdkafka"),
    ("libc (the rest)", None, r"libc[.-]"),
]
_LINE = re.compile(r"^\s*(?P<comm>.+?)\s+(?P<tid>\d+)\s+[0-9a-f]+\s+(?P<sym>.*?)\s+\((?P<dso>[^()]*)\)\s*$")


def kind(symbol: str, library: str) -> str:
    """The kind of work a sample in `symbol` of `library` was doing ("other" when none matches)."""
    library = _library(library)
    for name, sym_pattern, dso_pattern in KINDS:
        if sym_pattern is not None and re.search(sym_pattern, symbol, re.IGNORECASE):
            return name
        if dso_pattern is not None and re.search(dso_pattern, library):
            return name
    return "other"


def _library(dso: str) -> str:
    """A library's file name; the kernel's and the vDSO's names ("[kernel.kallsyms]") as perf gives them."""
    return dso if dso.startswith("[") else Path(dso).name


def thread_group(comm: str) -> str:
    """librdkafka names its threads rdk:broker<id>, rdk:main, rdk:bg; the rest are the interpreter's."""
    if comm.startswith("rdk:broker"):
        return "librdkafka broker threads"
    if comm.startswith("rdk:"):
        return "librdkafka main and background threads"
    return "Python threads (the worker's loop)"


@dataclass
class Split:
    samples: int = 0
    kinds: collections.Counter = field(default_factory=collections.Counter)
    threads: collections.Counter = field(default_factory=collections.Counter)
    symbols: collections.Counter = field(default_factory=collections.Counter)


def split(script: str) -> Split:
    """Count `perf script -F comm,tid,ip,sym,dso` lines by kind, thread group and symbol."""
    out = Split()
    for line in script.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        sym, dso = match["sym"], match["dso"]
        out.samples += 1
        out.kinds[kind(sym, dso)] += 1
        out.threads[thread_group(match["comm"])] += 1
        out.symbols[f"{sym} ({_library(dso)})"] += 1
    return out


def record(pid: int, seconds: float, data: Path, frequency: int = 499) -> None:
    """Sample every thread of `pid` for `seconds` (perf record -p follows no child process)."""
    subprocess.run(["perf", "record", "-q", "-F", str(frequency), "-p", str(pid), "-o", str(data), "--", "sleep",
                    str(seconds)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def script(data: Path) -> str:
    return subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,tid,ip,sym,dso"], check=True,
                          capture_output=True, text=True).stdout


def table(result: Split, cpu_per_million: float, top_symbols: int = 12) -> str:
    """Markdown: each kind and thread group as a share of the samples and as CPU-s per 1M records."""
    def rows(counter: collections.Counter) -> list[str]:
        return [f"| {name} | {100 * n / result.samples:.1f} % | {cpu_per_million * n / result.samples:.2f} |"
                for name, n in counter.most_common()]
    lines = ["| kind of work | share of samples | CPU-s per 1M records |", "|---|---:|---:|", *rows(result.kinds),
             "", "| threads | share of samples | CPU-s per 1M records |", "|---|---:|---:|", *rows(result.threads),
             "", "| symbol | share of samples |", "|---|---:|"]
    lines += [f"| `{sym}` | {100 * n / result.samples:.1f} % |" for sym, n in result.symbols.most_common(top_symbols)]
    return "\n".join(lines)
