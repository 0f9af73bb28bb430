"""The worker's lines (`python -m mirror_worker`, its flags, spec, client settings, clusters and subcommands) and the
input that makes it print each, for test_troubleshooting.py."""

from __future__ import annotations

from tests.unit.troubleshooting_cases import (
    CONSUMER,
    FLAGS,
    MIRROR,
    NOWHERE,
    PRODUCER,
    SOURCE,
    SPEC,
    SPEC_FLAGS,
    WORKER,
    case,
    with_mirror_keys,
    with_registry,
    with_reverse,
    with_source_kafka,
)

REGISTRY_NOWHERE = f'schema-registry-url: "http://{NOWHERE}"'


def truststore_without_certificate(*argv: str) -> int:
    """The spec's source names a PKCS12 truststore that holds a private key and no certificate (its password
    opens it)."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    from mirror_worker.commands.main import main

    key = ec.generate_private_key(ec.SECP256R1())
    with open("trust.p12", "wb") as store:
        store.write(pkcs12.serialize_key_and_certificates(b"k", key, None, None, BestAvailableEncryption(b"pw")))
    return main(list(argv))


CASES = {
    # the worker: flags
    "mirror_worker: --consumer.config is required (one per source cluster)": case(WORKER, "--whitelist", "a"),
    "mirror_worker: --producer.config is required": case(WORKER, *FLAGS[:2], "--whitelist", "a"),
    "mirror_worker: exactly one of --whitelist and --blacklist is required": case(WORKER, *FLAGS),
    "mirror_worker: --config cannot be combined with the classic flags; put them in the spec": case(
        WORKER, *SPEC_FLAGS, "--whitelist", "a"),
    "mirror_worker: --mirror needs --config": case(WORKER, *FLAGS, "--whitelist", "a", "--mirror", "m"),
    "mirror_worker: unrecognized arguments: …": case(WORKER, "--bogus"),
    "mirror_worker: argument …: invalid int value: …": case(WORKER, *FLAGS, "--whitelist", "a", "--num.streams", "two"),
    "mirror_worker: argument …: expected true or false, got …": case(
        WORKER, *FLAGS, "--whitelist", "a", "--exactly.once", "maybe"),
    "mirror_worker: config file not found: …": case(
        WORKER, "--consumer.config", "{dir}/none", "--producer.config", "{dir}/p.properties", "--whitelist", "a"),
    "mirror_worker: config file unreadable: …: …": case(
        WORKER, "--consumer.config", "{dir}", "--producer.config", "{dir}/p.properties", "--whitelist", "a"),
    "mirror_worker: …: invalid regex …: …": case(WORKER, *FLAGS, "--whitelist", "("),
    "mirror_worker: …: the comma in … would split the regex in two (a comma means …": case(
        WORKER, *FLAGS, "--whitelist", "a{1,2}"),
    "mirror_worker: …: must not be empty": case(WORKER, *FLAGS, "--whitelist", " "),
    "mirror_worker: …: … is not a legal Kafka topic name": case(WORKER, *FLAGS, "--whitelist", "a", "--prefix", "a/"),
    "mirror_worker: …: group.id: … differs from … of the consumer config before (one mirror, one consumer group)": case(
        WORKER, *FLAGS, "--consumer.config", "{dir}/c2.properties", "--whitelist", "a",
        c2_properties=CONSUMER.replace("group.id=g", "group.id=h")),
    # the worker: the YAML spec
    "mirror_worker: spec file not found: …": case(WORKER, "--config", "{dir}/none.yaml"),
    "mirror_worker: spec file unreadable: …: …": case(WORKER, "--config", "{dir}"),
    "mirror_worker: …: line … invalid YAML: …": case(WORKER, *SPEC_FLAGS, spec_yaml="groups: [\n"),
    "mirror_worker: …: a mapping with `groups` is expected": case(WORKER, *SPEC_FLAGS, spec_yaml="- a\n"),
    "mirror_worker: …: groups: a non-empty list is required": case(WORKER, *SPEC_FLAGS, spec_yaml="groups: []\n"),
    "mirror_worker: …: no mirrors defined": case(WORKER, *SPEC_FLAGS, spec_yaml=SPEC.split("    mirrors:")[0]),
    "mirror_worker: …: mirror …: the name is used twice": case(
        WORKER, *SPEC_FLAGS, spec_yaml=SPEC.replace(MIRROR, MIRROR + "        whitelist: a\n" + MIRROR)),
    "mirror_worker: …: mirror …: …: unknown key (did you mean …?)": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_mirror_keys("prefx: x.")),
    "mirror_worker: …: mirror …: name: required": case(
        WORKER, *SPEC_FLAGS, spec_yaml=SPEC.replace("- name: orders", "- whitelist: b")),
    "mirror_worker: …: mirror …: source: required (a mapping with kafka settings)": case(
        WORKER, *SPEC_FLAGS, spec_yaml=SPEC.replace(f"    {SOURCE}\n", "")),
    "mirror_worker: …: mirror …: …: bootstrap.servers is required": case(
        WORKER, *SPEC_FLAGS, spec_yaml=SPEC.replace(SOURCE, "source: {name: east, kafka: {}}")),
    "mirror_worker: …: mirror …: source … kafka: group.id: the mirror's consumer group is its group-id "
    "(default: group-id-prefix + its name): set that instead": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka("group.id: g")),
    "mirror_worker: …: mirror …: enabled: must be true or false (a YAML boolean, unquoted)": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_mirror_keys('enabled: "false"')),
    "mirror_worker: …: no mirror named … (have: …)": case(WORKER, *SPEC_FLAGS, "--mirror", "nope"),
    "mirror_worker: …: --mirror NAME is required (enabled mirrors: …)": case(
        WORKER, *SPEC_FLAGS, spec_yaml=SPEC + MIRROR.replace("orders", "other") + "        whitelist: b\n"),
    "mirror_worker: …: mirror … is disabled (enabled: false)": case(
        WORKER, *SPEC_FLAGS, "--mirror", "orders", spec_yaml=with_mirror_keys("enabled: false")),
    "mirror_worker: …: mirror …: exactly-once chooses transactional.id per source partition: remove it from the "
    "producer settings": case(WORKER, *SPEC_FLAGS, spec_yaml=with_mirror_keys("delivery: exactly-once").replace(
        f'destination: {{kafka: {{bootstrap.servers: "{NOWHERE}"',
        f'destination: {{kafka: {{bootstrap.servers: "{NOWHERE}", transactional.id: t')),
    "mirror_worker: …: mirror …: exactly one of whitelist and blacklist is required": case(
        WORKER, *SPEC_FLAGS, spec_yaml=SPEC.replace('        whitelist: "orders"\n', "")),
    "mirror_worker: …: mirror …: …: credentials in a schema registry URL are refused: give them as "
    "basic.auth.user.info in the registry's settings, from a ${file:...} placeholder": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_registry("source", 'schema-registry-url: "https://u:p@127.0.0.1:1"')),
    "mirror_worker: …: mirror …: prefix and topic_map cannot be combined": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_mirror_keys("prefix: x.\ntopic-map: {orders: o}")),
    "mirror_worker: …: groups[…]: a mapping is expected": case(WORKER, *SPEC_FLAGS, spec_yaml="groups: [3]\n"),
    "mirror_worker: …: mirror …: group settings: a mapping is expected": case(
        WORKER, *SPEC_FLAGS, spec_yaml=SPEC.replace("    mirrors:", "    settings: 3\n    mirrors:")),
    "mirror_worker: …: mirror …: group settings: group-id: every mirror of the group would share one consumer group "
    "(partitions split between them): set group-id on each mirror, or group-id-prefix": case(
        WORKER, *SPEC_FLAGS, spec_yaml=SPEC.replace("    mirrors:", "    settings: {group-id: x}\n    mirrors:")),
    "mirror_worker: …: mirror …: topic-creation: min_partitions must not exceed max_partitions": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_mirror_keys("topic-creation: {min-partitions: 3, max-partitions: 1}")),
    "mirror_worker: …: mirror …: topic-creation: min_replication_factor must not exceed max_replication_factor": case(
        WORKER, *SPEC_FLAGS,
        spec_yaml=with_mirror_keys("topic-creation: {min-replication-factor: 3, max-replication-factor: 1}")),
    "mirror_worker: …: mirror …: topic-creation: … must be at least 1 or 'mirror-source'": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_mirror_keys("topic-creation: {partitions: 0}")),
    "mirror_worker: …: mirror …: topic-creation: internal_replication_factor must be at least 1, or -1 for the "
    "brokers' default": case(WORKER, *SPEC_FLAGS,
                             spec_yaml=with_mirror_keys("topic-creation: {internal-replication-factor: 0}")),
    "mirror_worker: topic-map: several source topics map to …": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_mirror_keys("topic-map: {orders: o, other: o}")),
    "mirror_worker: …: mirror …: source cluster names must be unique, got …": case(
        WORKER, *SPEC_FLAGS, spec_yaml=SPEC.replace(f"    {SOURCE}\n", f"    sources: [{SOURCE[8:]}, {SOURCE[8:]}]\n")),
    "mirror_worker: …: mirror …: exactly-once needs a read_committed consumer (source … sets isolation.level=…)": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka("isolation.level: read_uncommitted").replace(
            MIRROR, MIRROR + "        delivery: exactly-once\n")),
    "mirror_worker: …: mirror …: source …: group.instance.id is derived per worker slot and stream: set "
    "static-membership (--static.membership) and --worker.slot instead": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka("group.instance.id: x")),
    "mirror_worker: …: mirror …: group.instance.id … (from the group id and the source name) must be at most 249 "
    "letters, digits, '.', '_' or '-': rename the source or the group": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_mirror_keys("static-membership: true\ngroup-id: " + "g" * 250)),
    "mirror_worker: --worker.slot: a non-negative integer is expected, got …": case(
        WORKER, *SPEC_FLAGS, "--worker.slot", "x"),
    "mirror_worker: …: mirror …: group-offset-sync-interval-ms needs preserve-partitions: offsets translate only "
    "when each destination partition holds its source partition's records": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_mirror_keys("group-offset-sync-interval-ms: 1000")),
    "mirror_worker: …: mirror …: reverse-of: no mirror named …": case(
        WORKER, *SPEC_FLAGS, "--mirror", "back", spec_yaml=with_reverse("reverse-of: nope")),
    "mirror_worker: …: mirror …: reverse-of: mirror … is invalid: …": case(
        WORKER, *SPEC_FLAGS, "--mirror", "back", spec_yaml=with_reverse(forward="prefx: x.")),
    "mirror_worker: …: mirror …: reverse-of: mirror … is itself a reverse mirror": case(
        WORKER, *SPEC_FLAGS, "--mirror", "back2", spec_yaml=with_reverse(
            "reverse-of: orders\nprovenance-headers: true\norigin-records: skip") + "      - name: back2\n"
        "        reverse-of: back\n"),
    "mirror_worker: …: mirror …: reverse-of: mirror … must write provenance headers (provenance-headers: true) for a "
    "failback mirror to tell its copies from new records": case(
        WORKER, *SPEC_FLAGS, "--mirror", "back", spec_yaml=with_reverse(forward="")),
    "mirror_worker: …: mirror …: reverse-of: mirror … decides the topics and their names: remove …": case(
        WORKER, *SPEC_FLAGS, "--mirror", "back", spec_yaml=with_reverse("reverse-of: orders\nwhitelist: a")),
    "mirror_worker: …: mirror …: reverse-of needs provenance-headers: the forward mirror, resumed after the "
    "failback, tells this mirror's copies by them": case(
        WORKER, *SPEC_FLAGS, "--mirror", "back",
        spec_yaml=with_reverse("reverse-of: orders\nprovenance-headers: false")),
    "mirror_worker: …: mirror …: reverse-of needs origin-records: skip (the forward mirror's copies are already on "
    "the destination)": case(WORKER, *SPEC_FLAGS, "--mirror", "back",
                             spec_yaml=with_reverse("reverse-of: orders\norigin-records: halt")),
    # the worker: client settings and secrets
    "mirror_worker: …: unknown key …": case(
        WORKER, *FLAGS, "--whitelist", "a", c_properties=CONSUMER + "fetch.wat=1\n"),
    "mirror_worker: …: invalid value … for …": case(
        WORKER, *FLAGS, "--whitelist", "a", c_properties=CONSUMER + "fetch.min.bytes=lots\n"),
    "mirror_worker: …: zookeeper.connect is the removed old consumer; use bootstrap.servers": case(
        WORKER, *FLAGS, "--whitelist", "a", c_properties=CONSUMER + "zookeeper.connect=zk:2181\n"),
    "mirror_worker: …: … must be …: the mirror commits offsets itself, after delivery": case(
        WORKER, *FLAGS, "--whitelist", "a", c_properties=CONSUMER + "enable.auto.commit=true\n"),
    "mirror_worker: …: …=… refused: …": case(WORKER, *FLAGS, "--whitelist", "a", p_properties=PRODUCER + "acks=1\n"),
    "mirror_worker: …: …: placeholders are not resolved here (the value is sent or shown in clear)": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka("client.id: '${env:HOME}'")),
    "mirror_worker: …: environment variable … (from ${env:...}) is not set": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka("sasl.username: '${env:TROUBLESHOOTING_UNSET}'")),
    "mirror_worker: …: unsupported config provider …; use file, directory or env": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka("sasl.username: '${vault:a:b}'")),
    "mirror_worker: …: secrets file … not found or unreadable": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka("sasl.username: '${file:/nonexistent/s.properties:pw}'")),
    "mirror_worker: …: no key … in secrets file …": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka("sasl.username: '${file:{dir}/p.properties:pw}'")),
    "mirror_worker: …: login module … is not supported (ScramLoginModule or PlainLoginModule)": case(
        WORKER, *FLAGS, "--whitelist", "a", c_properties=CONSUMER + "sasl.jaas.config=com.example.Module required;\n"),
    "mirror_worker: …: librdkafka cannot read a JKS truststore; export its CA certificate to PEM (keytool -exportcert "
    "-rfc -keystore FILE -alias ALIAS -file ca.pem) and set ssl.ca.location": case(
        WORKER, *FLAGS, "--whitelist", "a",
        c_properties=CONSUMER + "ssl.truststore.type=JKS\nssl.truststore.location={dir}/p.properties\n"),
    "mirror_worker: …: store type … is not supported (PEM, PKCS12 or JKS)": case(
        WORKER, *FLAGS, "--whitelist", "a",
        c_properties=CONSUMER + "ssl.truststore.type=BCFKS\nssl.truststore.location={dir}/p.properties\n"),
    "mirror_worker: …: … not found or unreadable": case(
        WORKER, *FLAGS, "--whitelist", "a",
        c_properties=CONSUMER + "ssl.truststore.type=PKCS12\nssl.truststore.location={dir}/none.p12\n"),
    "mirror_worker: …: …: allow-insecure: unknown … (known: …)": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_registry("source", "allow-insecure: bogus")),
    "mirror_worker: …: … refused; add … to allow-insecure to accept it": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka(
            "security.protocol: SASL_PLAINTEXT, sasl.mechanism: PLAIN, sasl.username: u, sasl.password: p")),
    'mirror_worker: …: expected `<LoginModule class> required key="value" ...;`': case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka("sasl.jaas.config: nonsense")),
    "mirror_worker: …: … needs username and password": case(WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka(
        "sasl.jaas.config: 'org.apache.kafka.common.security.plain.PlainLoginModule required;'")),
    "mirror_worker: …: OAuthBearerLoginModule is not translated; set librdkafka's sasl.oauthbearer.* keys "
    "instead": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka(
            "sasl.jaas.config: 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;'")),
    "mirror_worker: …: Krb5LoginModule is not translated; set librdkafka's sasl.kerberos.* keys instead": case(
        WORKER, *SPEC_FLAGS,
        spec_yaml=with_source_kafka("sasl.jaas.config: 'com.sun.security.auth.module.Krb5LoginModule required;'")),
    "mirror_worker: …: librdkafka cannot read a JKS keystore; convert it to PKCS12 (keytool -importkeystore "
    "-srckeystore FILE -destkeystore FILE.p12 -deststoretype PKCS12)": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka("ssl.keystore.type: JKS, ssl.keystore.location: /x")),
    "mirror_worker: …: … is not a PKCS12 truststore, or ssl.truststore.password is wrong": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka(
            "ssl.truststore.type: PKCS12, ssl.truststore.location: '{dir}/p.properties'")),
    "mirror_worker: …: … holds no certificate": case(
        truststore_without_certificate, *SPEC_FLAGS, spec_yaml=with_source_kafka(
            "ssl.truststore.type: PKCS12, ssl.truststore.location: trust.p12, ssl.truststore.password: pw")),
    "mirror_worker: …: ${…:PATH:KEY} expected": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka("sasl.username: '${file:nokey}'")),
    "mirror_worker: …: … must be a file name inside …": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_source_kafka("sasl.username: '${directory:{dir}:../x}'")),
    # schema registries
    "mirror_worker: …: mirror …: a destination schema registry needs a source schema registry "
    "(--schema.registry.url or the source's schema-registry-url)": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_registry("destination", 'schema-registry-url: "http://127.0.0.1:1"')),
    "mirror_worker: …: mirror …: a source schema registry needs a destination schema registry to sync schemas and "
    "rewrite schema ids (--destination.schema.registry.url or the destination's schema-registry-url)": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_registry("source", 'schema-registry-url: "http://127.0.0.1:1"')),
    "mirror_worker: …: mirror …: …: a schema registry URL must start with http:// or https://": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_registry("source", 'schema-registry-url: "ftp://x"')),
    "mirror_worker: …: mirror …: source …: schema registry settings without a schema registry URL": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_registry("source", 'schema-registry: {basic.auth.user.info: "a:b"}')),
    "mirror_worker: …: mirror …: destination schema registry settings without a destination schema registry URL": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_registry("destination", 'schema-registry: {basic.auth.user.info: "a:b"}')),
    "mirror_worker: …: mirror …: destination-schema-registry: give it as the destination's …": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_mirror_keys("destination-schema-registry: {a: b}")),
    "mirror_worker: …: a mapping of schema registry settings is expected": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_registry("source", "schema-registry: 3")),
    "mirror_worker: …: basic.auth.user.info must be USER:PASSWORD": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_registry(
            "source", 'schema-registry-url: "http://127.0.0.1:1", schema-registry: {basic.auth.user.info: "ab"}')),
    "mirror_worker: …: basic.auth.user.info and bearer.auth.token: … one of them": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_registry("source", 'schema-registry-url: "http://127.0.0.1:1", schema-'
                                                      'registry: {bearer.auth.token: t, basic.auth.user.info: "a:b"}')),
    "mirror_worker: …: bearer.auth.token needs bearer.auth.logical.cluster": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_registry(
            "source", 'schema-registry-url: "http://127.0.0.1:1", schema-registry: {bearer.auth.token: t}')),
    "mirror_worker: …: ssl.key.location needs ssl.certificate.location (the client certificate)": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_registry(
            "source", 'schema-registry-url: "http://127.0.0.1:1", schema-registry: {ssl.key.location: /k}')),
    # the worker: clusters
    "mirror_worker: destination cluster unreachable within …s: …": case(WORKER, *SPEC_FLAGS),
    "mirror_worker: source … cluster unreachable within …s: …": case(WORKER, *SPEC_FLAGS),
    # the subcommands
    "mirror_worker: the following arguments are required: …": case(WORKER, "sync-acls"),
    "mirror_worker: --topics: at least one topic name is required": case(WORKER, "sync-schemas", *SPEC_FLAGS,
                                                                         "--topics", ","),
    "mirror_worker: mirror … has no schema registries (a source schema-registry-url and a destination "
    "schema-registry-url are needed)": case(WORKER, "sync-schemas", *SPEC_FLAGS),
    "mirror_worker: source cluster … unreachable within …s: …": case(
        WORKER, "sync-schemas", *SPEC_FLAGS, spec_yaml=with_registry("destination", REGISTRY_NOWHERE).replace(
            SOURCE, SOURCE[:-1] + f", {REGISTRY_NOWHERE}}}")),
    "mirror_worker: --group: must not be empty": case(WORKER, "translate-offsets", *SPEC_FLAGS, "--group", " "),
    "mirror_worker: --rewind: only with --apply": case(WORKER, "translate-offsets", *SPEC_FLAGS, "--group", "g",
                                                       "--rewind"),
    "mirror_worker: mirror …: offset translation needs preserve-partitions (destination partition = source "
    "partition); with other routings a source partition spreads over several destination partitions": case(
        WORKER, "translate-offsets", *SPEC_FLAGS, "--group", "g"),
    "mirror_worker: mirror … has several source clusters: pass --source (…)": case(
        WORKER, "translate-offsets", *SPEC_FLAGS, "--group", "g", spec_yaml=with_mirror_keys(
            "preserve-partitions: true").replace(f"    {SOURCE}\n", f"    sources: [{SOURCE[8:]}, "
                                                 f"{SOURCE[8:].replace('east', 'west')}]\n")),
    "mirror_worker: mirror … has no source cluster …": case(
        WORKER, "translate-offsets", *SPEC_FLAGS, "--group", "g", "--source", "west",
        spec_yaml=with_mirror_keys("preserve-partitions: true")),
}
