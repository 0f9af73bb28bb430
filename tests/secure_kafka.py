"""Test-only secured Kafka nodes.

`secure_node`: a SASL_SSL listener (SCRAM-SHA-256/512, PLAIN) and an SSL listener that requires client
certificates, with certificates made here. `authorizer_node`: KRaft's StandardAuthorizer and a
SASL_PLAINTEXT listener (PLAIN), so that clients have principals that ACLs name.

The PLAINTEXT listener stays for bootstrapping (SCRAM users are created through it with the admin
API) and for the test's own reads and writes; clients under test use the SASL one.
"""

from __future__ import annotations

import datetime
import ipaddress
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from devstack.kafka import KafkaNode

SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _plain_login(users: dict[str, str] | None) -> str:
    """The broker's JAAS line for SASL/PLAIN: its users and their passwords."""
    plain = "".join(f' user_{user}="{password}"' for user, password in (users or {}).items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required{plain};"


@dataclass(frozen=True)
class Certificates:
    ca_pem: Path         # the CA certificate clients trust
    broker_pem: Path     # the broker's private key (PKCS#8) and certificate chain
    ca_p12: Path         # the CA certificate as a PKCS12 truststore (password `truststore_password`)
    client_p12: Path     # a client key and certificate as a PKCS12 keystore (password `keystore_password`)
    truststore_password: str = "trust-store-pw"
    keystore_password: str = "Client-Ks-Pw-4411"


def make_certificates(directory: Path) -> Certificates:
    """A CA and a broker certificate for 127.0.0.1 / localhost, with Python's `cryptography`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def build(subject: str, issuer_name, issuer_key, key, ca: bool):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mirror-test-ca")])
    ca_cert = build("mirror-test-ca", ca_name, ca_key, ca_key, ca=True)
    broker_key = ec.generate_private_key(ec.SECP256R1())
    broker_cert = build("localhost", ca_name, ca_key, broker_key, ca=False)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = build("mirror-client", ca_name, ca_key, client_key, ca=False)

    pem = serialization.Encoding.PEM
    certs = Certificates(directory / "ca.pem", directory / "broker.pem", directory / "ca.p12", directory / "client.p12")
    certs.ca_pem.write_bytes(ca_cert.public_bytes(pem))
    certs.broker_pem.write_bytes(
        broker_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        + broker_cert.public_bytes(pem) + ca_cert.public_bytes(pem)
    )
    certs.ca_p12.write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [ca_cert],
        serialization.BestAvailableEncryption(certs.truststore_password.encode()),
    ))
    certs.client_p12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"mirror-client", client_key, client_cert, [ca_cert],
        serialization.BestAvailableEncryption(certs.keystore_password.encode()),
    ))
    return certs


def secure_node(home: Path, certs: Certificates, plain_users: dict[str, str] | None = None,
                heap_mb: int = 320) -> KafkaNode:
    """A KafkaNode with a SASL_SSL listener (and the same users on SASL_PLAINTEXT); not started. PLAIN users live
    in the broker's JAAS line."""
    mechanisms = ("SCRAM-SHA-512", "SCRAM-SHA-256")
    settings = {
        "sasl.enabled.mechanisms": ",".join(mechanisms + ("PLAIN",)),
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.location": str(certs.broker_pem),
        **{f"listener.name.sasl_ssl.{m.lower()}.sasl.jaas.config": SCRAM_LOGIN for m in mechanisms},
        "listener.name.sasl_ssl.plain.sasl.jaas.config": _plain_login(plain_users),
        # The same users in clear (SASL_PLAINTEXT): what config/posture.py refuses without its opt-in.
        **{f"listener.name.sasl_plaintext.{m.lower()}.sasl.jaas.config": SCRAM_LOGIN for m in mechanisms},
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _plain_login(plain_users),
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": str(certs.broker_pem),
        "listener.name.ssl.ssl.truststore.type": "PEM",
        "listener.name.ssl.ssl.truststore.location": str(certs.ca_pem),
        "listener.name.ssl.ssl.client.auth": "required",
    }
    return KafkaNode("secure", home, heap_mb=heap_mb,
                     extra_listeners={"SASL_SSL": "SASL_SSL", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT"},
                     extra_settings=settings)


def authorizer_node(cluster: str, home: Path, plain_users: dict[str, str], super_users: list[str],
                    heap_mb: int = 256) -> KafkaNode:
    """A KafkaNode with KRaft's StandardAuthorizer and a SASL_PLAINTEXT listener of `plain_users`; not started.

    PLAINTEXT (inter-broker, controller, the test's own admin) is `User:ANONYMOUS`, a super user as the
    broker needs; `super_users` are too. Every other principal gets what ACLs grant, nothing by default.
    """
    settings = {
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": ";".join(f"User:{user}" for user in ("ANONYMOUS", *super_users)),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _plain_login(plain_users),
    }
    return KafkaNode(cluster, home, heap_mb=heap_mb, extra_listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
                     extra_settings=settings)


def sasl_plain_settings(node: KafkaNode, user: str, password: str) -> dict[str, str]:
    """Client settings that log in to `node`'s SASL_PLAINTEXT listener as `user`."""
    return {"bootstrap.servers": node.listener_bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": password}


def create_scram_user(node: KafkaNode, certs: Certificates, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
                      timeout: float = 60.0) -> None:
    """Create (or update) a SCRAM user through the admin API on the PLAINTEXT listener, and wait until
    the SASL_SSL listener accepts it."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap_servers})
    info = ScramCredentialInfo(getattr(ScramMechanism, mechanism.replace("-", "_")), 4096)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, password.encode())])
    futures[user].result(30)
    deadline = time.monotonic() + timeout
    while True:
        probe = AdminClient({
            "bootstrap.servers": node.listener_bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": str(certs.ca_pem),
        })
        try:
            probe.list_topics(timeout=5)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@contextmanager
def started_secure_node(home: Path, scram_users: dict[str, tuple[str, str]],
                        plain_users: dict[str, str] | None = None):
    """A started `secure_node` under `home` (its certificates in `home/certs`), with `scram_users` (user ->
    (password, mechanism)) created: yields (node, certificates), stops the node after."""
    certs = make_certificates(home / "certs")
    node = secure_node(home / "node", certs, plain_users=plain_users)
    node.start()
    try:
        node.wait_ready(120)
        for user, (password, mechanism) in scram_users.items():
            create_scram_user(node, certs, user, password, mechanism)
        yield node, certs
    finally:
        node.stop()


def client_pem(certs: Certificates) -> tuple[str, str]:
    """(private key, certificate chain) of the client keystore as PEM text: librdkafka's ssl.key.pem and
    ssl.certificate.pem, Java's inline ssl.keystore.key and ssl.keystore.certificate.chain."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    key, cert, chain = pkcs12.load_key_and_certificates(certs.client_p12.read_bytes(), certs.keystore_password.encode())
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    return key_pem, "".join(c.public_bytes(pem).decode() for c in [cert, *chain])
