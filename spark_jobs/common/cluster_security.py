"""What a Spark application of the mirror must have set before the mirror's credentials leave the driver: one
decision, taken by the jobs (spark_jobs.common.session) and by the Airflow operators before spark-submit
(mirror_airflow/operators/spark.py), both through `secured_conf`.

The catch-up's tasks carry the worker's resolved client settings in their closures, and the check's JVM tasks in
a JSON string: SASL passwords, key passwords, registry credentials travel over Spark's RPC to every executor.
Off a local master that RPC must be authenticated and encrypted:

- `spark.authenticate` and `spark.network.crypto.enabled` are turned on when the application has the cluster's
  shared secret (`spark.authenticate.secret`, which a standalone master and its workers hold too), or runs where
  Spark makes a secret per application (YARN, Kubernetes);
- without one, or with either setting turned off, an application that ships credentials is refused (one line
  naming the settings); one that ships none runs as before.

Everywhere, the UI's ACLs are on (view and modify for the submitting user unless the conf names others) and
`spark.redaction.regex` covers the mirror's secret keys (the worker's redaction.is_secret_key), which Spark's
default (`(?i)secret|password|token|access[.]?key`) misses for e.g. `kafka.sasl.jaas.config` or
`kafka.ssl.keystore.key`: Spark redacts a property or option shown in the UI and the event log when its key or
its value matches.
"""

from __future__ import annotations

import getpass
import importlib.util
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from mirror_worker.batch_api import SECRET_KEY_PATTERN, is_secret_key, redact_url
from spark_jobs.common.job_config import JobInputError

SECRET = "spark.authenticate.secret"
PROTECTION = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
SPARK_DEFAULT_REDACTION = "(?i)secret|password|token|access[.]?key"
REDACTION = "spark.redaction.regex"
_LOCAL = re.compile(r"local(\[.*\])?$")


class UnprotectedCredentials(JobInputError):
    """The application would ship the mirror's credentials over Spark's RPC without authentication and encryption."""


def is_local(master: str | None) -> bool:
    return master is None or bool(_LOCAL.match(master.strip()))


def makes_own_secret(master: str) -> bool:
    """Spark generates a secret per application on these masters (SecurityManager.initializeAuth)."""
    return master == "yarn" or master.startswith("k8s://")


def _on(conf: Mapping[str, str], key: str) -> bool | None:
    value = str(conf.get(key, "")).strip().lower()
    return {"true": True, "false": False}.get(value)


def redaction_regex(conf: Mapping[str, str], secret_key_pattern: str) -> str:
    """The conf's redaction regex (Spark's default when it has none) widened by the mirror's secret keys."""
    current = conf.get(REDACTION) or SPARK_DEFAULT_REDACTION
    if secret_key_pattern in current:
        return current
    return f"{current}|(?i:{secret_key_pattern})"


def secured_conf(master: str | None, conf: Mapping[str, str], secrets: Iterable[str],
                 secret_key_pattern: str = SECRET_KEY_PATTERN, user: str | None = None) -> dict[str, str]:
    """The settings to add to `conf` (what the application would otherwise run with: spark-defaults and the
    submission's conf) for an application on `master` that ships `secrets` (names of credential settings, for the
    message); UnprotectedCredentials when it would ship them unprotected."""
    secrets, user = list(secrets), user or getpass.getuser()
    added = {REDACTION: redaction_regex(conf, secret_key_pattern)}
    added.update({k: v for k, v in {"spark.acls.enable": "true", "spark.ui.view.acls": user,
                                    "spark.modify.acls": user}.items() if k not in conf})
    if is_local(master):
        return added
    switched_off = [key for key in PROTECTION if _on(conf, key) is False]
    has_secret = bool(conf.get(SECRET)) or makes_own_secret(master)
    if secrets and (switched_off or not has_secret):
        required = " and ".join(f"{k}=true" for k in PROTECTION)
        why = (f"{' and '.join(f'{k}=false' for k in switched_off)} in the Spark conf; {required} are required"
               if switched_off else
               f"no {SECRET} (the cluster's shared secret) in the Spark conf; give it in spark-defaults.conf "
               f"(SPARK_CONF_DIR) and {required} are set")
        shown = ", ".join(secrets[:4]) + (", ..." if len(secrets) > 4 else "")
        raise UnprotectedCredentials(f"refused: the mirror's credentials ({shown}) would reach {master} over "
                                     f"unauthenticated, unencrypted RPC: {why}")
    # The operator's secret means the cluster authenticates (a standalone master refuses an application without
    # it); a secret Spark makes itself is used only where credentials travel.
    if (conf.get(SECRET) or (secrets and has_secret)) and not switched_off:
        added.update({k: v for k, v in PROTECTION.items() if k not in conf})
    return added


def unprotected(master: str | None, conf: Mapping[str, str], secrets: Iterable[str]) -> list[str]:
    """The PROTECTION settings a running application's conf lacks while it ships `secrets` (none when it ships
    none, or runs locally)."""
    if is_local(master) or not list(secrets):
        return []
    return [f"{key}=true" for key in PROTECTION if _on(conf, key) is not True]


def settings_secrets(sides: Mapping[str, Mapping | None]) -> list[str]:
    """`side key` for every non-empty credential setting of the named settings (a side's client settings, a
    registry's), and `side url` for a URL with a password."""
    found = []
    for side, settings in sides.items():
        for key, value in (settings or {}).items():
            if value in (None, "") or isinstance(value, Mapping):
                continue
            if is_secret_key(str(key)) or (key == "url" and redact_url(str(value)) != str(value)):
                found.append(f"{side} {key}")
    return found


def mirror_secrets(mirror) -> list[str]:
    """The credential settings of a mirror's config (worker's MirrorConfig) that a Spark job of it ships."""
    sides = {}
    for source in mirror.sources:
        sides[f"source {source.name}"] = source.consumer
        sides[f"source {source.name} registry"] = mirror.source_registry(source)
    sides["destination"] = mirror.producer
    sides["destination registry"] = mirror.destination_registry
    return settings_secrets(sides)


def target_secrets(target) -> tuple[str, ...]:
    """The credential settings a job's tasks carry, from its JobTarget: its mirror's, or its flags' settings."""
    if target.mirror is not None:
        return tuple(mirror_secrets(target.mirror))
    return tuple(settings_secrets({"source": target.source_settings, "destination": target.destination_settings}))


def spark_home(environ: Mapping[str, str] = os.environ) -> Path:
    """The Spark spark-submit runs: SPARK_HOME, else pyspark's folder (`.` without either)."""
    home = environ.get("SPARK_HOME")
    if not home:
        spec = importlib.util.find_spec("pyspark")  # found, not imported: the operators import this module
        home = str(Path(spec.origin).parent) if spec and spec.origin else "."
    return Path(home)


def spark_defaults(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The spark-defaults.conf spark-submit reads (SPARK_CONF_DIR, else spark_home()'s conf/), as a dict; {}
    without one."""
    directory = environ.get("SPARK_CONF_DIR") or str(spark_home(environ) / "conf")
    path = Path(directory) / "spark-defaults.conf"
    try:
        text = path.read_text()
    except OSError:
        return {}
    return parse_properties(text)


def parse_properties(text: str) -> dict[str, str]:
    """`key value` / `key=value` lines of a Java properties file (no continuations), comments skipped."""
    conf = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"(\S+?)(?:\s*[=:]\s*|\s+)(.*)$", line)
        key, value = (match.group(1), match.group(2).strip()) if match else (line, "")
        conf[key] = value
    return conf

