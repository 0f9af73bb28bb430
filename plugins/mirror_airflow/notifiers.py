"""Compatibility: the notifiers live in mirror_airflow.notifications."""

from mirror_airflow.notifications import (  # noqa: F401
    AlertSettings, EmailNotifier, SlackWebhookNotifier, WebhookNotifier, alert_fields, alert_text, notifiers_for,
    post_json, smtp_available,
)
