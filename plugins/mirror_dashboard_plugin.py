"""The Airflow plugin of the Kafka mirror dashboard: a FastAPI app the api-server mounts at
/mirror-dashboard, and a nav entry ("Kafka mirrors") that shows it inside the UI. See plugins/README.md."""

from airflow.plugins_manager import AirflowPlugin

from mirror_airflow.dashboard.app import URL_PREFIX, create_app


class MirrorDashboardPlugin(AirflowPlugin):
    name = "kafka_mirror_dashboard"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Kafka mirror dashboard"}]
    external_views = [{
        "name": "Kafka mirrors",
        "href": f"{URL_PREFIX}/",
        "destination": "nav",
        "url_route": "kafka-mirrors",  # shown in the UI's frame at /plugin/kafka-mirrors
    }]
