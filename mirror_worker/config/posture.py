"""The security posture: settings that send secrets in clear or trust any peer are refused unless named.

Refused, each with one line naming the opt-in that accepts it (issue 46, item 3):

    cleartext-sasl               SASL_PLAINTEXT with a mechanism that sends a password or token, or whose
                                 exchange an eavesdropper can replay or crack offline (PLAIN, SCRAM-*,
                                 OAUTHBEARER): everything but GSSAPI
    no-hostname-verification     ssl.endpoint.identification.algorithm none (or empty)
    no-certificate-verification  enable.ssl.certificate.verification false
    http-registry                an http:// schema registry, unless on a loopback address without
                                 credentials (config/registry.py: credentials over http:// need it anywhere)
    http-api                     the Airflow REST API over http:// (its connection carries a password)

PLAINTEXT without SASL stays allowed: it carries no credential (the local stack and tests run so). An
http:// registry on loopback is allowed because nothing crosses a network and no credential is sent; one
elsewhere lets anyone on the path rewrite the schemas the mirror registers on the destination.

The opt-in sits beside what it weakens: `allow-insecure` in a spec's source or destination mapping, in
a `.properties` file, or in an Airflow connection's extra (a list, or names separated by commas). Each
accepted weakness is logged once per process, at start.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from urllib.parse import urlsplit

from mirror_worker.exceptions import ConfigError

log = logging.getLogger(__name__)

ALLOW_INSECURE_KEY = "allow-insecure"
OPT_INS = {
    "cleartext-sasl": "SASL credentials over SASL_PLAINTEXT (sent in clear)",
    "no-hostname-verification": "ssl.endpoint.identification.algorithm none (TLS peer's name not checked)",
    "no-certificate-verification": "enable.ssl.certificate.verification false (any TLS certificate trusted)",
    "http-registry": "a schema registry over http://",
    "http-api": "the Airflow REST API over http:// (its password in clear)",
}
_SAFE_OVER_CLEARTEXT = {"GSSAPI"}

_logged: set[tuple[str, str]] = set()
_lock = threading.Lock()


def allowed_insecure(value, where: str) -> frozenset[str]:
    """The opt-in names of an `allow-insecure` value (a list, or a comma-separated string); unknown names refused."""
    if value is None or value == "":
        return frozenset()
    names = value if isinstance(value, (list, tuple)) else str(value).strip("[]").split(",")
    chosen = frozenset(str(n).strip().strip("'\"") for n in names if str(n).strip())
    unknown = sorted(chosen - set(OPT_INS))
    if unknown:
        raise ConfigError(f"{where}: {ALLOW_INSECURE_KEY}: unknown {unknown[0]!r} (known: {', '.join(OPT_INS)})")
    return chosen


def client_weaknesses(settings: dict[str, str]) -> list[str]:
    """The opt-ins librdkafka `settings` (translated: sasl.mechanisms, `none`) would need."""
    found = []
    protocol = str(settings.get("security.protocol", "")).upper()
    mechanism = str(settings.get("sasl.mechanisms", "GSSAPI")).upper()
    if protocol == "SASL_PLAINTEXT" and (mechanism not in _SAFE_OVER_CLEARTEXT or settings.get("sasl.password")):
        found.append("cleartext-sasl")
    if str(settings.get("ssl.endpoint.identification.algorithm", "https")).lower() in ("none", ""):
        found.append("no-hostname-verification")
    if str(settings.get("enable.ssl.certificate.verification", "true")).lower() in ("false", "0"):
        found.append("no-certificate-verification")
    return found


def url_weakness(url: str | None, opt_in: str) -> str | None:
    """`opt_in` when `url` is http:// to anything but loopback, or carries credentials; else None."""
    if not url or not url.lower().startswith("http://"):
        return None
    parts = urlsplit(url)
    return None if _is_loopback(parts.hostname) and not parts.username and not parts.password else opt_in


def _is_loopback(host: str | None) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def enforce(weaknesses: list[str], allowed: frozenset[str], where: str) -> None:
    """Refuse the first weakness not opted in (one line naming the opt-in); log the accepted ones once."""
    for name in weaknesses:
        if name not in allowed:
            raise ConfigError(f"{where}: {OPT_INS[name]} refused; add {name} to {ALLOW_INSECURE_KEY} to accept it")
    for name in weaknesses:
        with _lock:
            if (where, name) in _logged:
                continue
            _logged.add((where, name))
        log.warning("%s: insecure setting accepted (%s: %s): %s", where, ALLOW_INSECURE_KEY, name, OPT_INS[name])


def check_client(settings: dict[str, str], allowed: frozenset[str], where: str) -> None:
    enforce(client_weaknesses(settings), allowed, where)


def check_url(url: str | None, opt_in: str, allowed: frozenset[str], where: str) -> None:
    weakness = url_weakness(url, opt_in)
    enforce([weakness] if weakness else [], allowed, where)
