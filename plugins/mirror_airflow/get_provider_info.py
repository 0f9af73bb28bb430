"""The provider's metadata for Airflow's ProvidersManager (entry point `apache_airflow_provider` in
pyproject.toml). Pure data: loading it imports none of the provider's modules.

No connection type is declared: Kafka connections are the official Kafka provider's `kafka` type (our
KafkaHook builds on its KafkaBaseHook), and the schema registry and the REST API use `http`.
"""

from __future__ import annotations

PACKAGE_NAME = "kafka-mirror"
INTEGRATION = "Kafka mirror"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE_NAME)
    except PackageNotFoundError:  # imported from the plugins folder without the package installed
        import tomllib
        from pathlib import Path

        with open(Path(__file__).resolve().parents[2] / "pyproject.toml", "rb") as file:
            return tomllib.load(file)["project"]["version"]


def get_provider_info() -> dict:
    def modules(*names: str) -> list[dict]:
        return [{"integration-name": INTEGRATION, "python-modules": [f"mirror_airflow.{n}" for n in names]}]

    return {
        "package-name": PACKAGE_NAME,
        "name": INTEGRATION,
        "description": "Kafka cross-cluster mirroring run from Airflow: topic discovery and creation, schema sync, "
                       "supervised mirror workers, Spark catch-up and consistency checks, an offset-lag sensor, "
                       "a failover runbook.",
        "versions": [_version()],
        "integrations": [{"integration-name": INTEGRATION, "external-doc-url": "https://kafka.apache.org/",
                          "tags": ["apache"]}],
        "hooks": modules("hooks.kafka", "hooks.schema_registry", "hooks.airflow_api", "hooks.offsets"),
        "operators": modules("operators.topics", "operators.schemas", "operators.worker", "operators.handover",
                             "operators.spark", "operators.failover"),
        "sensors": modules("sensors.lag"),
        "triggers": modules("triggers.lag"),
        "notifications": [
            "mirror_airflow.notifications.alerts.WebhookNotifier",
            "mirror_airflow.notifications.alerts.SlackWebhookNotifier",
            "mirror_airflow.notifications.alerts.EmailNotifier",
        ],
    }
