"""Airflow control plane of the Kafka mirror: hooks, operators, DAG factory (see plugins/README.md)."""
