"""Handing a record to confluent-kafka's `Producer.produce` on a hot path: by position, never by keyword.

`Producer.produce` is a C function that parses its arguments with CPython's `PyArg_ParseTupleAndKeywords`. A call
that names any argument has its names gathered into a new dictionary, and the parser looks every parameter not
given by position up in it, by a name it first builds as a new string. Naming `timestamp`, `headers` and
`on_delivery` cost ~0.5-0.6 us a call more than passing the same values by position (confluent-kafka 2.16, 100,000
calls repeated ten times, least of each: 1.34 against 0.81 us; two named, 1.34 against 0.78), against 3.6-6 us of
the worker's CPU per 100 B record in all (bench.compare, depending on the machine's day).

`POSITIONS` is the parameters' order (confluent-kafka's keyword list for `produce`):
`callback` and `on_delivery` are one parameter under two names, so a call by position passes the delivery callback
(or None) fifth and None sixth. tests/unit/mirror_worker/clients/test_produce_positions.py checks the order against
the installed client; every real-stack test of timestamps and headers checks it end to end.
"""

from __future__ import annotations

POSITIONS = ("topic", "value", "key", "partition", "callback", "on_delivery", "timestamp", "headers")
