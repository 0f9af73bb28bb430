"""Fails to import (Airflow shows it) when an enabled mirror of $KAFKA_MIRROR_SPEC has no DAG file here.

The DAGs themselves come from the per-mirror files `mirror__NAME.py` (see dags/README.md); this file
defines no DAG. Regenerate with: python -m mirror_airflow.dag_factory render --spec SPEC --out dags/
"""

from pathlib import Path

from mirror_airflow.dag_factory import check_rendered

check_rendered(Path(__file__).parent)
