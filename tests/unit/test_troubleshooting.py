"""docs/operations/troubleshooting.md against the code: every error line the page lists is printed by its command,
run here in this process through its entry point with the input the page names as the cause (no server: the
clusters are 127.0.0.1:1), and every case here is on the page. `…` on the page stands for any text."""

from __future__ import annotations

import pytest

from mirror_worker.config.placeholders import SECRETS_DIRS_VARIABLE
from tests.unit.troubleshooting_sites import documented_exit_codes, pattern

NOWHERE = "127.0.0.1:1"
SPEC = f"""groups:
  - name: g
    source: {{name: east, kafka: {{bootstrap.servers: "{NOWHERE}"}}}}
    destination: {{kafka: {{bootstrap.servers: "{NOWHERE}"}}}}
    mirrors:
      - name: orders
        whitelist: "orders"
        startup-timeout-s: 2
"""
MIRROR = "      - name: orders\n"
SOURCE = f'source: {{name: east, kafka: {{bootstrap.servers: "{NOWHERE}"}}}}'
CONSUMER = f"bootstrap.servers={NOWHERE}\ngroup.id=g\n"
PRODUCER = f"bootstrap.servers={NOWHERE}\n"


def with_mirror_keys(text: str) -> str:
    """The spec with `text` (YAML lines of the mirror) added to its mirror."""
    return SPEC.replace(MIRROR, MIRROR + "".join(f"        {line}\n" for line in text.splitlines()))


def with_source_kafka(text: str) -> str:
    """The spec with `text` (`key: value, ...`) added to the source's kafka settings."""
    return SPEC.replace(SOURCE, SOURCE.replace(f'"{NOWHERE}"', f'"{NOWHERE}", {text}'))


# The commands, as `python -m` runs them: (module, its main).
WORKER, CATCHUP, CHECK = "mirror_worker.commands.main", "spark_jobs.catchup.job", "spark_jobs.check.job"
FLAGS = ["--consumer.config", "{dir}/c.properties", "--producer.config", "{dir}/p.properties"]
SPEC_FLAGS = ["--config", "{dir}/spec.yaml"]
CHECK_FLAGS = ["--config", "{dir}/spec.yaml", "--report", "{dir}/r.json"]
CATCHUP_FLAGS = ["--config", "{dir}/spec.yaml"]
EXPLICIT = ["--source.bootstrap.servers", NOWHERE, "--destination.bootstrap.servers", NOWHERE, "--topics", "a"]


def case(command: str, *argv: str, exit_code: int = 2, **files: str) -> tuple:
    """A command's argv ({dir}: a folder holding c.properties, p.properties and spec.yaml, and `files`: name ->
    text, a name's `_` read as `.`) and the exit code the page gives."""
    return command, list(argv), exit_code, {name.replace("_", "."): text for name, text in files.items()}


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
    "mirror_worker: …: a mapping with … is expected": case(WORKER, *SPEC_FLAGS, spec_yaml="- a\n"),
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
    "mirror_worker: …: mirror …: prefix and topic_map cannot be combined": case(
        WORKER, *SPEC_FLAGS, spec_yaml=with_mirror_keys("prefix: x.\ntopic-map: {orders: o}")),
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
    # the worker: clusters
    "mirror_worker: destination cluster unreachable within …s: …": case(WORKER, *SPEC_FLAGS),
    "mirror_worker: source … cluster unreachable within …s: …": case(WORKER, *SPEC_FLAGS),
    # the subcommands
    "mirror_worker: the following arguments are required: …": case(WORKER, "sync-acls"),
    "mirror_worker: --topics: at least one topic name is required": case(WORKER, "sync-schemas", *SPEC_FLAGS,
                                                                         "--topics", ","),
    "mirror_worker: mirror … has no schema registries (a source schema-registry-url and a destination "
    "schema-registry-url are needed)": case(WORKER, "sync-schemas", *SPEC_FLAGS),
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
    # the Spark jobs: both
    "catchup: --source.bootstrap.servers is required (or --config mirrors.yaml --mirror NAME)": case(
        CATCHUP, "--topics", "a"),
    "catchup: --config cannot be combined with --source/--destination.bootstrap.servers": case(
        CATCHUP, *CATCHUP_FLAGS, *EXPLICIT),
    "catchup: mirror … has several sources; Spark jobs take one": case(
        CATCHUP, *CATCHUP_FLAGS, spec_yaml=SPEC.replace(
            f"    {SOURCE}\n", f"    sources: [{SOURCE[8:]}, {SOURCE[8:].replace('east', 'west')}]\n")),
    "consistency_check: the following arguments are required: …": case(CHECK, "--topics", "a"),
    # the catch-up
    "catchup: --group.id is required (the mirror's consumer group), or --no-commit": case(CATCHUP, *EXPLICIT),
    "catchup: --from-offsets and --from-timestamp cannot be combined": case(
        CATCHUP, *EXPLICIT, "--no-commit", "--from-offsets", "a:0:1", "--from-timestamp", "1"),
    "catchup: bad timestamp …: use epoch milliseconds or ISO-8601": case(
        CATCHUP, *EXPLICIT, "--no-commit", "--from-timestamp", "yesterday"),
    "catchup: bad --from-offsets entry …: expected topic:partition:offset": case(
        CATCHUP, *EXPLICIT, "--no-commit", "--from-offsets", "a:0"),
    "catchup: --from-offsets is empty": case(CATCHUP, *EXPLICIT, "--no-commit", "--from-offsets", ","),
    # the consistency check
    "consistency_check: --report: give the JSON path; the HTML summary is written beside it": case(
        CHECK, "--config", "{dir}/spec.yaml", "--report", "{dir}/r.html"),
    "consistency_check: --report: … is a directory": case(CHECK, "--config", "{dir}/spec.yaml", "--report", "{dir}"),
    "consistency_check: --offsets cannot be combined with --from-timestamp/--to-timestamp": case(
        CHECK, *CHECK_FLAGS, "--offsets", "a:0:1-2", "--from-timestamp", "1"),
    "consistency_check: --offsets: … is not topic:partition:from-to": case(CHECK, *CHECK_FLAGS, "--offsets", "a:0"),
    "consistency_check: bad window: --offsets …: from … is not below to …": case(
        CHECK, *CHECK_FLAGS, "--offsets", "a:0:5-5"),
    "consistency_check: --offsets: …:… is given twice": case(CHECK, *CHECK_FLAGS, "--offsets", "a:0:1-2,a:0:3-4"),
    "consistency_check: bad window: --from-timestamp … is not before --to-timestamp …": case(
        CHECK, *CHECK_FLAGS, "--from-timestamp", "2000", "--to-timestamp", "1000"),
    "consistency_check: …: … is neither epoch milliseconds nor an ISO-8601 time": case(
        CHECK, *CHECK_FLAGS, "--from-timestamp", "yesterday"),
    "consistency_check: …: … is before 1970-01-01T00:00:00Z": case(
        CHECK, *CHECK_FLAGS, "--from-timestamp", "1969-12-31T00:00:00Z"),
}


def test_the_page_lists_exactly_the_cases_run_here_with_their_exit_codes():
    assert documented_exit_codes() == {line: str(exit_code) for line, (_, _, exit_code, _) in CASES.items()}


def run_command(module: str, argv: list[str], capsys) -> tuple[int, list[str]]:
    """The command's main in this process: its exit code and the plain lines of its stderr (the clients' own JSON
    log lines may come first)."""
    import importlib

    main = importlib.import_module(module).main
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own exits (--help), should a case reach one
        code = exc.code
    printed = [text for text in capsys.readouterr().err.splitlines() if text and not text.startswith("{")]
    return code, printed


@pytest.mark.parametrize("line", sorted(CASES))
def test_the_command_prints_the_documented_line(line, tmp_path, capsys, monkeypatch):
    module, argv, exit_code, files = CASES[line]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TROUBLESHOOTING_UNSET", raising=False)
    monkeypatch.delenv(SECRETS_DIRS_VARIABLE, raising=False)  # placeholders as on a host that names none
    written = {"c.properties": CONSUMER, "p.properties": PRODUCER, "spec.yaml": SPEC, **files}
    for name, text in written.items():
        (tmp_path / name).write_text(text.replace("{dir}", str(tmp_path)))
    code, printed = run_command(module, [arg.replace("{dir}", str(tmp_path)) for arg in argv], capsys)
    assert code == exit_code, printed
    assert any(pattern(line).match(text) for text in printed), f"{line!r} not in:\n" + "\n".join(printed)
