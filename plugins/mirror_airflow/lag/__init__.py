"""The lag feature's logic: `rules` (pure: samples, sliding windows, limits, the evaluation), `measure`
(a mirror's per-partition samples read from Kafka) and `dag` (each mirror's lag DAG); its Airflow parts are
`mirror_airflow.sensors.lag` and `mirror_airflow.triggers.lag`.
"""
