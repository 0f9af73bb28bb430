"""mirrored_headers: the one header transform of the worker's hot path and the catch-up's copy loop."""

from mirror_worker.provenance import PROVENANCE_HEADER, mirrored_headers, provenance_value

HOP = provenance_value("src", "cluster-src", "orders", 2, 41)


def test_headers_pass_through_without_provenance():
    assert mirrored_headers([("a", b"1"), ("b", None)], None, "cluster-dst") == [("a", b"1"), ("b", None)]
    assert mirrored_headers(None, None, "cluster-dst") == []


def test_this_hops_provenance_replaces_an_earlier_hops():
    earlier = provenance_value("up", "cluster-up", "orders", 0, 7)
    out = mirrored_headers([(PROVENANCE_HEADER, earlier), ("a", b"1")], HOP, "cluster-dst")
    assert out == [("a", b"1"), (PROVENANCE_HEADER, HOP)]


def test_an_earlier_hops_provenance_is_kept_when_this_hop_adds_none():
    earlier = provenance_value("up", "cluster-up", "orders", 0, 7)
    assert mirrored_headers([(PROVENANCE_HEADER, earlier)], None, "cluster-dst") == [(PROVENANCE_HEADER, earlier)]


def test_a_record_from_the_destination_cluster_is_a_cycle():
    looped = provenance_value("back", "cluster-dst", "orders", 0, 7)
    assert mirrored_headers([("a", b"1"), (PROVENANCE_HEADER, looped)], HOP, "cluster-dst") == looped
    assert mirrored_headers([(PROVENANCE_HEADER, looped)], None, "cluster-dst") == looped
