"""Security settings: Java client keys (JAAS, JKS/PKCS12/PEM stores) onto librdkafka's.

Secrets from `${file:...}`-style placeholders are resolved before this (config/placeholders.py, with the
host's allowlist of secrets directories). Where librdkafka cannot do what a Java key asks (a JKS store, a
Kerberos or OAuth login module), the error names the key and the way out.
"""

from __future__ import annotations

import re
from pathlib import Path

from mirror_worker.exceptions import ConfigError
from mirror_worker.redaction import register_secret

_JAVA_ONLY_SSL_KEYS = {
    "ssl.protocol", "ssl.enabled.protocols", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation", "ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password",
}
_LOGIN_MODULE = re.compile(r"^\s*(?P<cls>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)\b(?P<opts>.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r"""(?P<name>[\w.-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))""")


def translate_security(settings: dict[str, str], where: str) -> dict[str, str]:
    """Java security keys onto librdkafka's; everything else passes through untouched."""
    out = {k: v for k, v in settings.items() if k not in _JAVA_ONLY_SSL_KEYS and k != "sasl.jaas.config"}
    if "sasl.jaas.config" in settings:
        out.update(_jaas_credentials(settings["sasl.jaas.config"], where))
    if "sasl.mechanism" in out:
        out["sasl.mechanisms"] = out.pop("sasl.mechanism")
    if out.get("ssl.endpoint.identification.algorithm", None) == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    _translate_truststore(settings, out, where)
    _translate_keystore(settings, out, where)
    return out


def _jaas_credentials(jaas: str, where: str) -> dict[str, str]:
    where = f"{where}: sasl.jaas.config"
    match = _LOGIN_MODULE.match(jaas)
    if not match:
        raise ConfigError(f"{where}: expected `<LoginModule class> required key=\"value\" ...;`")
    module = match.group("cls").rsplit(".", 1)[-1]
    options = {
        m.group("name"): (m.group("quoted") if m.group("quoted") is not None else m.group("bare")).replace('\\"', '"')
        for m in _JAAS_OPTION.finditer(match.group("opts"))
    }
    if module in ("ScramLoginModule", "PlainLoginModule"):
        missing = [o for o in ("username", "password") if not options.get(o)]
        if missing:
            raise ConfigError(f"{where}: {module} needs {' and '.join(missing)}")
        register_secret(options["password"])
        return {"sasl.username": options["username"], "sasl.password": options["password"]}
    if module == "OAuthBearerLoginModule":
        raise ConfigError(f"{where}: OAuthBearerLoginModule is not translated; "
                          "set librdkafka's sasl.oauthbearer.* keys instead")
    if module == "Krb5LoginModule":
        raise ConfigError(f"{where}: Krb5LoginModule is not translated; "
                          "set librdkafka's sasl.kerberos.* keys instead")
    raise ConfigError(f"{where}: login module {module} is not supported (ScramLoginModule or PlainLoginModule)")


def _translate_truststore(settings: dict[str, str], out: dict[str, str], where: str) -> None:
    if "ssl.truststore.certificates" in settings:  # Java's PEM truststore given inline
        out["ssl.ca.pem"] = out.pop("ssl.truststore.certificates")
    location = out.pop("ssl.truststore.location", None)
    if not location:
        return
    where = f"{where}: ssl.truststore.location"
    kind = _store_type(settings.get("ssl.truststore.type"), Path(location), where)
    if kind == "PEM":
        out["ssl.ca.location"] = location
    elif kind == "PKCS12":
        out["ssl.ca.pem"] = _pkcs12_certificates(Path(location), settings.get("ssl.truststore.password"), where)
    else:
        raise ConfigError(f"{where}: librdkafka cannot read a JKS truststore; export its CA certificate to PEM "
                          "(keytool -exportcert -rfc -keystore FILE -alias ALIAS -file ca.pem) and set ssl.ca.location")


def _translate_keystore(settings: dict[str, str], out: dict[str, str], where: str) -> None:
    if "ssl.keystore.certificate.chain" in settings:  # Java's PEM keystore given inline
        out["ssl.certificate.pem"] = out.pop("ssl.keystore.certificate.chain")
    if "ssl.keystore.key" in settings:
        out["ssl.key.pem"] = out.pop("ssl.keystore.key")
    location = out.get("ssl.keystore.location")
    if not location:
        return
    where = f"{where}: ssl.keystore.location"
    kind = _store_type(settings.get("ssl.keystore.type"), Path(location), where)
    if kind == "PEM":  # one file with the private key and the certificate chain
        del out["ssl.keystore.location"]
        out.pop("ssl.keystore.password", None)
        out["ssl.key.location"] = location
        out["ssl.certificate.location"] = location
    elif kind == "JKS":
        raise ConfigError(f"{where}: librdkafka cannot read a JKS keystore; convert it to PKCS12 "
                          "(keytool -importkeystore -srckeystore FILE -destkeystore FILE.p12 -deststoretype PKCS12)")
    # PKCS12: librdkafka reads ssl.keystore.location and ssl.keystore.password itself.


def _store_type(declared: str | None, path: Path, where: str) -> str:
    """PEM, PKCS12 or JKS: as declared, else from the file's first bytes (Java's default type is JKS)."""
    if declared:
        kind = declared.strip().upper()
        if kind not in ("PEM", "PKCS12", "JKS"):
            raise ConfigError(f"{where}: store type {declared!r} is not supported (PEM, PKCS12 or JKS)")
        return kind
    try:
        head = path.read_bytes()[:64]
    except OSError:
        raise ConfigError(f"{where}: {path} not found or unreadable") from None
    if head.startswith(b"\xfe\xed\xfe\xed") or head.startswith(b"\xce\xce\xce\xce"):
        return "JKS"
    if b"-----BEGIN" in head:
        return "PEM"
    return "PKCS12"


def _pkcs12_certificates(path: Path, password: str | None, where: str) -> str:
    """The certificates of a PKCS12 truststore as PEM text (librdkafka's ssl.ca.pem)."""
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    try:
        store = pkcs12.load_pkcs12(path.read_bytes(), password.encode() if password else None)
    except OSError:
        raise ConfigError(f"{where}: {path} not found or unreadable") from None
    except ValueError:
        raise ConfigError(f"{where}: {path} is not a PKCS12 truststore, or ssl.truststore.password is wrong") from None
    certificates = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certificates.insert(0, store.cert.certificate)
    if not certificates:
        raise ConfigError(f"{where}: {path} holds no certificate")
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certificates)


_JAVA_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def java_security_settings(settings: dict[str, str]) -> dict[str, str]:
    """The security part of librdkafka settings as Java client keys (for Spark's Kafka source and sink).

    The inverse of translate_security for what both clients can express; other keys are left out.
    """
    out = {k: v for k, v in settings.items() if k == "security.protocol"}
    mechanism = settings.get("sasl.mechanisms") or settings.get("sasl.mechanism")
    if mechanism:
        out["sasl.mechanism"] = mechanism
    if mechanism in _JAVA_LOGIN_MODULES and "sasl.username" in settings:
        quote = lambda v: v.replace("\\", "\\\\").replace('"', '\\"')  # noqa: E731
        out["sasl.jaas.config"] = (f'{_JAVA_LOGIN_MODULES[mechanism]} required '
                                   f'username="{quote(settings["sasl.username"])}" '
                                   f'password="{quote(settings.get("sasl.password", ""))}";')
    if "ssl.ca.location" in settings:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": settings["ssl.ca.location"]})
    elif "ssl.ca.pem" in settings:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": settings["ssl.ca.pem"]})
    if "ssl.keystore.location" in settings:
        out.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": settings["ssl.keystore.location"]})
        if "ssl.keystore.password" in settings:
            out["ssl.keystore.password"] = settings["ssl.keystore.password"]
    elif "ssl.key.location" in settings and settings.get("ssl.certificate.location") == settings["ssl.key.location"]:
        out.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": settings["ssl.key.location"]})
    elif "ssl.key.pem" in settings and "ssl.certificate.pem" in settings:
        out.update({"ssl.keystore.type": "PEM", "ssl.keystore.key": settings["ssl.key.pem"],
                    "ssl.keystore.certificate.chain": settings["ssl.certificate.pem"]})
    if "ssl.key.password" in settings and "ssl.keystore.type" in out:
        out["ssl.key.password"] = settings["ssl.key.password"]
    if settings.get("ssl.endpoint.identification.algorithm") == "none":
        out["ssl.endpoint.identification.algorithm"] = ""
    return out
