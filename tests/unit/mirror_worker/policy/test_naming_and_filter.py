import pytest

from mirror_worker.exceptions import ConfigError, TopicMappingError
from mirror_worker.policy.filter import TopicFilter, is_internal_topic
from mirror_worker.policy.naming import ExplicitMapPolicy, IdentityPolicy, PrefixPolicy, check_mapping

POLICIES = {
    "identity": IdentityPolicy(),
    "prefix": PrefixPolicy("src."),
    "map": ExplicitMapPolicy({"orders": "orders-mirror"}, fallback=PrefixPolicy("m.")),
}


@pytest.mark.parametrize("policy, source, remote, upstream_of_remote", [
    ("identity", "orders", "orders", "orders"),
    ("prefix", "orders", "src.orders", "orders"),
    ("prefix", "src.orders", "src.src.orders", "src.orders"),
    ("map", "orders", "orders-mirror", "orders"),
    ("map", "users", "m.users", "users"),
])
def test_policy_round_trip(policy, source, remote, upstream_of_remote):
    p = POLICIES[policy]
    assert p.remote_topic(source) == remote
    assert p.upstream_topic(remote) == upstream_of_remote


@pytest.mark.parametrize("policy, destination_topic", [
    ("prefix", "orders"),       # not made by this policy
    ("prefix", "src."),         # prefix alone is no topic
    ("map", "m.orders"),        # orders is mapped explicitly elsewhere
])
def test_upstream_of_foreign_names_is_none(policy, destination_topic):
    assert POLICIES[policy].upstream_topic(destination_topic) is None


def test_explicit_map_refuses_two_sources_into_one_topic():
    with pytest.raises(ConfigError, match="several source topics map to 'x'"):
        ExplicitMapPolicy({"a": "x", "b": "x"})


@pytest.mark.parametrize("prefix", ["", "bad/prefix", "sp ace"])
def test_prefix_must_form_legal_topic_names(prefix):
    with pytest.raises(ConfigError):
        PrefixPolicy(prefix)


@pytest.mark.parametrize("whitelist, blacklist, topic, expected", [
    ("orders.*", None, "orders.eu", True),
    ("orders.*", None, "myorders", False),          # whole-name match, as MirrorMaker
    ("orders,users", None, "users", True),          # a comma means |
    ("orders,users", None, "orders,users", False),
    (None, "secret.*", "public", True),
    (None, "secret.*", "secret.keys", False),
    (".*", None, "__consumer_offsets", False),      # internal topics never
    (".*", None, "app-KSTREAM-repartition-internal", False),
    (".*", None, "mirror.heartbeats", False),       # the mirror's own topics never
    (None, "nothing", "_schemas", True),            # single underscore is an ordinary topic
])
def test_topic_filter(whitelist, blacklist, topic, expected):
    assert TopicFilter.from_expressions(whitelist, blacklist).should_replicate(topic) is expected


@pytest.mark.parametrize("whitelist, blacklist, message", [
    (None, None, "exactly one of --whitelist and --blacklist is required"),
    ("a", "b", "exactly one of --whitelist and --blacklist is required"),
    ("orders(", None, "whitelist: invalid regex 'orders\\('"),
    ("", None, "whitelist: must not be empty"),
    ("t[0-9]{1,2}", None, "whitelist: the comma in \\{1,2\\} would split the regex in two"),
    (None, "x{2,}", "blacklist: the comma in \\{2,\\}"),
])
def test_topic_filter_bad_input(whitelist, blacklist, message):
    with pytest.raises(ConfigError, match=message):
        TopicFilter.from_expressions(whitelist, blacklist)


def test_internal_topic_patterns():
    assert is_internal_topic("__transaction_state")
    assert is_internal_topic("x.mirror.offset-syncs")
    assert not is_internal_topic("orders")


def test_same_cluster_identity_is_refused():
    with pytest.raises(TopicMappingError, match="write topic 'orders' into itself"):
        check_mapping(["orders"], IdentityPolicy(), TopicFilter.from_expressions("orders", None), same_cluster=True)


def test_same_cluster_prefix_whose_output_is_selected_again_is_a_cycle():
    with pytest.raises(TopicMappingError, match="cycle: 'orders' -> 'p.orders'"):
        check_mapping(["orders"], PrefixPolicy("p."), TopicFilter.from_expressions(None, "nothing"), same_cluster=True)


def test_same_cluster_prefix_outside_the_filter_is_fine():
    check_mapping(["orders"], PrefixPolicy("p."), TopicFilter.from_expressions("orders", None), same_cluster=True)


def test_different_clusters_with_identity_is_fine():
    check_mapping(["orders"], IdentityPolicy(), TopicFilter.from_expressions("orders", None), same_cluster=False)
