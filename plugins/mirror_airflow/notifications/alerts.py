"""On-call notifiers: a generic JSON webhook, a Slack-style webhook and e-mail through Airflow's SMTP provider.

`notifiers_for(alerts)` turns a mirror's raw `alerts:` mapping (kebab-case keys) into notifiers for
`on_failure_callback`:

    alerts:
      webhook-url: https://on-call.example/hooks/kafka       # generic HTTP JSON POST
      webhook-connection: oncall_webhook                      # or an Airflow connection holding the URL
      slack-webhook-url: https://hooks.slack.com/services/... # {"text": ...}
      slack-webhook-connection: slack_oncall
      email: [oncall@example.com]                             # needs apache-airflow-providers-smtp
      email-connection: smtp_default
      timeout-seconds: 10

Webhook URLs often carry a token: they are never logged, only their scheme and host.
"""

from __future__ import annotations

import asyncio
import html
import http.client
import json
import logging
import re
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from airflow.sdk import BaseNotifier
from mirror_airflow.spec_models import KebabModel

log = logging.getLogger(__name__)

_DAG_ID = re.compile(r"^mirror__(?P<mirror>.+?)(?:__(?:lag|verify|catchup))?$")


class AlertSettings(KebabModel):
    webhook_url: SecretStr | None = Field(None, description="POST the alert as JSON here (never logged)")
    webhook_connection: str | None = Field(None, description="or an Airflow connection holding that URL")
    slack_webhook_url: SecretStr | None = Field(None, description='POST {"text": ...} here (never logged)')
    slack_webhook_connection: str | None = Field(None, description="or an Airflow connection holding that URL")
    email: list[str] = Field(default_factory=list, description="addresses the text is mailed to (SMTP provider)")
    email_connection: str | None = Field(None, description="the SMTP connection")
    timeout_seconds: float = Field(10.0, gt=0, description="timeout of one notification")

    @field_validator("webhook_url", "slack_webhook_url")
    @classmethod
    def _http_url(cls, value: SecretStr | None) -> SecretStr | None:
        # The message must not echo the URL: it may carry a token.
        if value is not None and urlsplit(value.get_secret_value()).scheme not in ("http", "https"):
            raise ValueError("an http:// or https:// URL is expected")
        return value


# The message ----------------------------------------------------------------------------------------


def alert_fields(context, mirror: str | None = None) -> dict:
    """What on-call needs to know, from a task-failure context: plain values, no links."""
    ti = context.get("ti") or context.get("task_instance")
    dag_id = getattr(ti, "dag_id", None) or getattr(context.get("dag"), "dag_id", None) or "?"
    task_id = getattr(ti, "task_id", None) or getattr(context.get("task"), "task_id", None) or "?"
    if mirror is None and (match := _DAG_ID.match(dag_id)):
        mirror = match.group("mirror")
    error = context.get("exception")
    status = getattr(error, "status", None) or "FAILED"
    detail = " ".join(str(error).split()) if error is not None else "task failed"
    return {
        "mirror": mirror or "?",
        "dag_id": dag_id,
        "task_id": task_id,
        "run_id": context.get("run_id") or getattr(ti, "run_id", None) or "?",
        "try_number": getattr(ti, "try_number", None),
        "status": str(getattr(status, "value", status)),
        "detail": detail,
        "worst_partitions": list(getattr(error, "worst", []) or []),
    }


def alert_text(fields: dict) -> str:
    return (f"Kafka mirror {fields['mirror']}: {fields['status']} "
            f"({fields['dag_id']}.{fields['task_id']}, run {fields['run_id']})\n{fields['detail']}")


# Webhooks -------------------------------------------------------------------------------------------


def _safe_target(url: str) -> str:
    """The URL's scheme and host only: its path and query may hold a token."""
    try:
        parts = urlsplit(url)
    except ValueError:  # a broken IPv6 literal
        return "(its URL)"
    return f"{parts.scheme}://{parts.hostname or '?'}" if parts.scheme else "(its URL)"


def _connection_url(conn_id: str) -> str:
    """An Airflow connection as a URL: a host that is a full URL wins; else schema://host:port + extra endpoint."""
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    host = conn.host or ""
    if host.startswith(("http://", "https://")):
        base = host
    else:
        base = f"{conn.schema or 'https'}://{host}" + (f":{conn.port}" if conn.port else "")
    endpoint = (conn.extra_dejson or {}).get("endpoint", "")
    return base.rstrip("/") + ("/" + endpoint.lstrip("/") if endpoint else "")


def post_json(url: str, payload: dict, timeout: float) -> int:
    try:  # the Request itself refuses a URL without a scheme or with a broken IPv6 literal
        request = urllib.request.Request(
            url, data=json.dumps(payload).encode(), method="POST", headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"webhook {_safe_target(url)} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RuntimeError(f"webhook {_safe_target(url)} unreachable: {reason}") from None
    except (ValueError, http.client.InvalidURL):  # InvalidURL: a space or a control character in the URL
        raise RuntimeError(f"webhook {_safe_target(url)}: not a usable URL") from None


class WebhookNotifier(BaseNotifier):
    """POSTs the alert as JSON: mirror, dag_id, task_id, run_id, status, detail, worst_partitions, text."""

    def __init__(self, url: str | None = None, *, connection_id: str | None = None, mirror: str | None = None,
                 timeout: float = 10.0):
        super().__init__()
        if (url is None) == (connection_id is None):
            raise ValueError("give exactly one of url and connection_id")
        self._url = url
        self.connection_id = connection_id
        self.mirror = mirror
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"{type(self).__name__}(connection_id={self.connection_id!r}, mirror={self.mirror!r})"

    def payload(self, fields: dict) -> dict:
        return {**fields, "text": alert_text(fields)}

    def notify(self, context) -> None:
        url = self._url or _connection_url(self.connection_id)
        fields = alert_fields(context, self.mirror)
        status = post_json(url, self.payload(fields), self.timeout)
        log.info("alert sent to %s (HTTP %s): mirror %s %s", _safe_target(url), status, fields["mirror"],
                 fields["status"])

    async def async_notify(self, context) -> None:
        await asyncio.to_thread(self.notify, context)


class SlackWebhookNotifier(WebhookNotifier):
    """A Slack-style incoming webhook: `{"text": ...}`."""

    def payload(self, fields: dict) -> dict:
        return {"text": alert_text(fields)}


# E-mail ---------------------------------------------------------------------------------------------


def smtp_available() -> bool:
    try:
        import airflow.providers.smtp.hooks.smtp  # noqa: F401
    except ImportError:
        return False
    return True


class EmailNotifier(BaseNotifier):
    """The alert as a plain-text e-mail through the SMTP provider's hook (connection `email-connection`)."""

    def __init__(self, to: list[str], *, connection_id: str | None = None, mirror: str | None = None):
        super().__init__()
        self.to = list(to)
        self.connection_id = connection_id
        self.mirror = mirror

    def notify(self, context) -> None:
        from airflow.providers.smtp.hooks.smtp import SmtpHook

        fields = alert_fields(context, self.mirror)
        subject = f"Kafka mirror {fields['mirror']}: {fields['status']}"
        body = f"<pre>{html.escape(alert_text(fields))}</pre>"
        conn_id = self.connection_id or SmtpHook.default_conn_name
        with SmtpHook(smtp_conn_id=conn_id) as hook:
            hook.send_email_smtp(to=self.to, subject=subject, html_content=body)
        log.info("alert e-mailed to %d recipient(s): mirror %s %s", len(self.to), fields["mirror"], fields["status"])


def notifiers_for(alerts: dict | None, mirror: str | None = None) -> list[BaseNotifier]:
    """The notifiers a mirror's `alerts:` mapping asks for (empty mapping: none). Bad keys: ConfigError."""
    settings = AlertSettings.parse(alerts, "alerts")
    timeout = settings.timeout_seconds
    out: list[BaseNotifier] = []
    if settings.webhook_url:
        out.append(WebhookNotifier(settings.webhook_url.get_secret_value(), mirror=mirror, timeout=timeout))
    if settings.webhook_connection:
        out.append(WebhookNotifier(connection_id=settings.webhook_connection, mirror=mirror, timeout=timeout))
    if settings.slack_webhook_url:
        out.append(SlackWebhookNotifier(settings.slack_webhook_url.get_secret_value(), mirror=mirror, timeout=timeout))
    if settings.slack_webhook_connection:
        out.append(SlackWebhookNotifier(connection_id=settings.slack_webhook_connection, mirror=mirror,
                                        timeout=timeout))
    if settings.email:
        if smtp_available():
            out.append(EmailNotifier(settings.email, connection_id=settings.email_connection, mirror=mirror))
        else:
            log.warning("alerts.email ignored: apache-airflow-providers-smtp is not installed")
    return out
