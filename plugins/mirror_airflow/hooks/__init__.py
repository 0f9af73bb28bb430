"""Hooks: Kafka clients (on the official Kafka provider's `kafka` connection type), the schema registry
(`http`), the Airflow REST API calls of the lifecycle operators (`http`), and a mirror's consumer-group
offsets for the failover (from the mirror spec).
"""
