"""The Spark security posture (issue 46 item 5): what a job's conf gets, what is refused, which settings are
credentials; pure, from tables (the real cluster: tests/integration/test_security.py)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from spark_jobs.common.cluster_security import (
    PROTECTION, SPARK_DEFAULT_REDACTION, UnprotectedCredentials, mirror_secrets, parse_properties, secured_conf,
    settings_secrets, spark_defaults, unprotected,
)
from spark_jobs.common.job_config import JobInputError

SECRETS = ["source sasl.password"]
CLUSTER = "spark://h:7077"
WITH_SECRET = {"spark.authenticate.secret": "s3cr3t-shared"}
POSTURE = {"spark.acls.enable": "true", "spark.ui.view.acls": "alice", "spark.modify.acls": "alice"}


def conf_for(master, conf, secrets=SECRETS):
    return secured_conf(master, conf, secrets, user="alice")


@pytest.mark.parametrize("master, conf, secrets, protected", [
    ("local[*]", {}, SECRETS, False),                    # nothing leaves the process
    ("local", WITH_SECRET, SECRETS, False),
    (None, {}, SECRETS, False),                          # create_session's default: local[*]
    (CLUSTER, WITH_SECRET, SECRETS, True),               # the operator's secret turns both on
    (CLUSTER, WITH_SECRET, [], True),                    # the cluster wants it whatever the job carries
    (CLUSTER, {}, [], False),                            # no credentials, no secret: runs as before
    ("yarn", {}, SECRETS, True),                         # Spark makes a secret per application
    ("k8s://https://api:6443", {}, SECRETS, True),
    ("yarn", {}, [], False),
])
def test_protection_is_set_where_credentials_or_the_secret_go_to_a_cluster(master, conf, secrets, protected):
    added = conf_for(master, conf, secrets)
    assert {k: added.get(k) for k in PROTECTION} == ({k: "true" for k in PROTECTION} if protected
                                                    else {k: None for k in PROTECTION})
    assert {k: added[k] for k in POSTURE} == POSTURE
    assert "spark.authenticate.secret" not in added  # never copied (onto spark-submit's command line)


@pytest.mark.parametrize("conf, named", [
    ({}, "no spark.authenticate.secret (the cluster's shared secret) in the Spark conf"),
    ({**WITH_SECRET, "spark.authenticate": "false"}, "spark.authenticate=false in the Spark conf"),
    ({**WITH_SECRET, "spark.network.crypto.enabled": "FALSE"}, "spark.network.crypto.enabled=false in the Spark conf"),
])
def test_credentials_for_an_unprotected_cluster_are_refused_in_one_line_naming_the_settings(conf, named):
    with pytest.raises(UnprotectedCredentials) as refused:
        conf_for(CLUSTER, conf, ["source sasl.jaas.config", "destination sasl.password"])
    message = str(refused.value)
    assert "\n" not in message and named in message and isinstance(refused.value, JobInputError)
    assert message.startswith("refused: the mirror's credentials (source sasl.jaas.config, destination "
                              "sasl.password) would reach spark://h:7077 over unauthenticated, unencrypted RPC")
    assert "spark.authenticate=true and spark.network.crypto.enabled=true" in message
    assert "s3cr3t" not in message


def test_settings_the_submission_already_has_are_kept_and_the_acls_it_names_win():
    conf = {**WITH_SECRET, "spark.authenticate": "true", "spark.ui.view.acls": "ops,alice", "spark.acls.enable": "true"}
    added = conf_for(CLUSTER, conf)
    assert "spark.authenticate" not in added and "spark.ui.view.acls" not in added and "spark.acls.enable" not in added
    assert added["spark.network.crypto.enabled"] == "true" and added["spark.modify.acls"] == "alice"


def test_the_redaction_regex_covers_the_mirrors_secret_keys_that_sparks_default_misses():
    regex = conf_for("local[*]", {})["spark.redaction.regex"]
    assert regex.startswith(SPARK_DEFAULT_REDACTION)
    for key in ("kafka.sasl.jaas.config", "kafka.ssl.keystore.key", "kafka.ssl.key.pem", "basic.auth.user.info"):
        assert not re.search(SPARK_DEFAULT_REDACTION.removeprefix("(?i)"), key, re.I), key  # the gap
        assert re.search(regex, key), key
    assert re.search(regex, "-----BEGIN PRIVATE KEY-----")  # Spark redacts by value too
    own = "(?i)mytoken|secret"
    assert conf_for("local[*]", {"spark.redaction.regex": own})["spark.redaction.regex"].startswith(own + "|")
    widened = conf_for("local[*]", {})["spark.redaction.regex"]
    assert conf_for("local[*]", {"spark.redaction.regex": widened})["spark.redaction.regex"] == widened  # once


@pytest.mark.parametrize("master, conf, secrets, missing", [
    (CLUSTER, {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}, SECRETS, []),
    (CLUSTER, {"spark.authenticate": "true"}, SECRETS, ["spark.network.crypto.enabled=true"]),
    (CLUSTER, {}, SECRETS, ["spark.authenticate=true", "spark.network.crypto.enabled=true"]),
    (CLUSTER, {}, [], []),
    ("local[2]", {}, SECRETS, []),
])
def test_a_running_session_is_checked_for_what_it_lacks(master, conf, secrets, missing):
    assert unprotected(master, conf, secrets) == missing


def test_credential_settings_are_named_by_side_and_key_never_by_value():
    sides = {"source east": {"bootstrap.servers": "b:9092", "sasl.jaas.config": "x required password=\"pw1\";",
                             "ssl.key.password": "", "sasl.mechanism": "PLAIN"},
             "destination": {"sasl.password": "pw2", "ssl.keystore.key": "-----BEGIN..."},
             "destination registry": {"url": "https://u:pw3@registry:8081"},
             "source east registry": None}
    assert settings_secrets(sides) == ["source east sasl.jaas.config", "destination sasl.password",
                                       "destination ssl.keystore.key", "destination registry url"]
    assert settings_secrets({"source": {"url": "https://registry:8081", "bootstrap.servers": "b"}}) == []


def test_a_mirrors_credentials_include_its_registries():
    source = SimpleNamespace(name="east", consumer={"sasl.password": "pw"})
    mirror = SimpleNamespace(sources=[source], producer={"bootstrap.servers": "d"},
                             source_registry=lambda s: {"url": "http://r", "basic.auth.user.info": "u:p"},
                             destination_registry=None)
    assert mirror_secrets(mirror) == ["source east sasl.password", "source east registry basic.auth.user.info"]


def test_spark_defaults_come_from_spark_conf_dir_else_spark_home(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text(
        "# comment\n! also\nspark.authenticate.secret   abc=def\nspark.master=spark://h:7077\n"
        "spark.eventLog.dir: file:///tmp/x\n\n")
    expected = {"spark.authenticate.secret": "abc=def", "spark.master": "spark://h:7077",
                "spark.eventLog.dir": "file:///tmp/x"}
    assert spark_defaults({"SPARK_CONF_DIR": str(tmp_path / "conf")}) == expected
    assert spark_defaults({"SPARK_HOME": str(tmp_path)}) == expected
    assert spark_defaults({"SPARK_CONF_DIR": str(tmp_path / "none")}) == {}
    assert parse_properties("spark.ui.enabled false") == {"spark.ui.enabled": "false"}
