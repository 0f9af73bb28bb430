"""mirrored_headers: the one header transform of the worker's hot path and the catch-up's copy loop."""

import pytest

from mirror_worker.policy.provenance import PROVENANCE_HEADER, mirrored_headers, provenance_value

HOP = provenance_value("src", "cluster-src", "orders", 2, 41)


def test_headers_pass_through_without_provenance():
    headers = [("a", b"1"), ("b", None)]
    assert mirrored_headers(headers, None, "cluster-dst", "orders", "m.orders") == headers
    assert mirrored_headers(None, None, "cluster-dst", "orders", "m.orders") == []


def test_this_hops_provenance_replaces_an_earlier_hops():
    earlier = provenance_value("up", "cluster-up", "orders", 0, 7)
    out = mirrored_headers([(PROVENANCE_HEADER, earlier), ("a", b"1")], HOP, "cluster-dst", "orders", "m.orders")
    assert out == [("a", b"1"), (PROVENANCE_HEADER, HOP)]


def test_an_earlier_hops_provenance_is_kept_when_this_hop_adds_none():
    earlier = provenance_value("up", "cluster-up", "orders", 0, 7)
    headers = [(PROVENANCE_HEADER, earlier)]
    assert mirrored_headers(headers, None, "cluster-dst", "orders", "m.orders") == headers


@pytest.mark.parametrize("topic, destination_topic", [
    ("orders", "m.orders"),         # identity naming there: the record sits in the topic its header names
    ("dr.orders", "m.dr.orders"),   # that topic under a prefix
    ("back", "orders"),             # this mirror maps it back onto that topic (a failback pair, a topic map)
])
def test_a_copy_of_a_destination_record_is_a_cycle(topic, destination_topic):
    looped = provenance_value("back", "cluster-dst", "orders", 0, 7)
    assert mirrored_headers([("a", b"1"), (PROVENANCE_HEADER, looped)], HOP, "cluster-dst", topic,
                            destination_topic) == looped
    assert mirrored_headers([(PROVENANCE_HEADER, looped)], None, "cluster-dst", topic, destination_topic) == looped


def test_a_header_an_application_forwarded_is_no_cycle():
    """Kafka Streams read `dr.orders` (copies of the destination's `orders`) and wrote `enriched`: its records
    carry the copies' header, but they are new records, in a topic no mirror names after `orders`."""
    forwarded = provenance_value("back", "cluster-dst", "orders", 0, 7)
    out = mirrored_headers([("a", b"1"), (PROVENANCE_HEADER, forwarded)], HOP, "cluster-dst", "enriched", "m.enriched")
    assert out == [("a", b"1"), (PROVENANCE_HEADER, HOP)]
    assert mirrored_headers([(PROVENANCE_HEADER, forwarded)], None, "cluster-dst", "enriched", "m.enriched") == [
        (PROVENANCE_HEADER, forwarded)]
