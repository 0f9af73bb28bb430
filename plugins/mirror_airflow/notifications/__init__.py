"""Notifications: `alerts` holds the on-call notifiers (JSON webhook, Slack-style webhook, e-mail through
Airflow's SMTP provider) and `notifiers_for`, which builds them from a mirror's `alerts:` mapping.
"""
