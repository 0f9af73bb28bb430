"""The Router: which destination topic, partition and producer each source partition's records take."""

from mirror_worker.policy.naming import IdentityPolicy, PrefixPolicy
from mirror_worker.policy.routing import ANY_PARTITION, Router


def test_routes():
    router = Router(PrefixPolicy("src."), preserve_partitions=True, preserve_order=False)
    assert (router.route("orders", 3).topic, router.route("orders", 3).partition) == ("src.orders", 3)

    by_key = Router(IdentityPolicy(), preserve_partitions=False, preserve_order=False)
    assert by_key.route("orders", 3).partition == ANY_PARTITION

    ordered = Router(IdentityPolicy(), preserve_partitions=False, preserve_order=True)
    ordered.set_destination_partitions("orders", 2)
    assert [ordered.route("orders", p).partition for p in range(4)] == [0, 1, 0, 1]
    ordered.set_destination_partitions("orders", 4)  # growth re-routes
    assert [ordered.route("orders", p).partition for p in range(4)] == [0, 1, 2, 3]


def test_each_source_partition_sticks_to_one_producer():
    router = Router(IdentityPolicy(), False, True, num_producers=3)
    router.set_destination_partitions("t", 8)
    picks = {p: router.route("t", p).producer_index for p in range(8)}
    assert set(picks.values()) <= {0, 1, 2} and len(set(picks.values())) > 1
    assert all(router.route("t", p).producer_index == picks[p] for p in range(8))
