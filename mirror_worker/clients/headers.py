"""A record's headers, read once and safely: the one place every plane reads `Message.headers()`.

Kafka allows any bytes in a header name (sarama, franz-go, kcat and librdkafka's C API write them), but
confluent-kafka decodes each name as UTF-8. On one that is not, its C method returns a list holding a NULL
where the name should be, with the UnicodeDecodeError left set: called through CPython's C call API that
is a SystemError; a second call returns the cached list without any error, and touching its NULL crashes
the interpreter. No other accessor hands the raw bytes to Python, so such a record cannot be copied
faithfully: each caller gets `UnreadableHeaders` naming the reason and decides what its plane does (the
worker halts the record's partition, the catch-up fails its range, the check counts a difference, the
offset translation treats the record as one without provenance). Never call `msg.headers()` again after
it failed.
"""

from __future__ import annotations

import operator

from mirror_worker.exceptions import MirrorError

# Why not `msg.headers()`: only a call made through CPython's C call API checks for a result returned with an
# error set (and raises SystemError). The interpreter's specialised call of a method descriptor without
# arguments, which a hot loop gets after a few calls, does not: the list with its NULL is handed on and the
# error surfaces at some later call, or iterating the list crashes the process (seen on the real stack: the
# worker died of SIGSEGV in mirrored_headers). `methodcaller` is C and calls through that API every time.
HEADERS = operator.methodcaller("headers")
# What calling HEADERS may raise on a header name that is not UTF-8 (`unreadable_reason` says what it means).
# A hot loop calls HEADERS itself and catches these (a function call more per record is ~70 ns, ~4 % of the hot
# path's cost per record, bench.hot_path_cost); every other caller takes read_headers.
UNREADABLE = (SystemError, UnicodeDecodeError)


class UnreadableHeaders(MirrorError):
    """A record whose headers the client cannot hand over (a header name that is not UTF-8)."""


def read_headers(msg) -> list | None:
    """`msg.headers()`, called exactly once; `UnreadableHeaders` if the client cannot decode them."""
    try:
        return HEADERS(msg)
    except UNREADABLE as exc:
        reason = unreadable_reason(exc)
        raise UnreadableHeaders(reason) from None


def unreadable_reason(exc: BaseException) -> str:
    """Why a record cannot be copied, from an exception of UNREADABLE that HEADERS raised."""
    # SystemError wraps the UnicodeDecodeError; a later client version may raise that plainly.
    cause = exc if isinstance(exc, UnicodeDecodeError) else exc.__cause__ or exc.__context__
    if isinstance(cause, UnicodeDecodeError):
        name = bytes(cause.object[:64])
        return f"header name {name!r} is not UTF-8: the Kafka client cannot read it, so it cannot be copied"
    return f"the Kafka client cannot read the record's headers: {exc}"
