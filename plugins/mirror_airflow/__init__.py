"""Airflow control plane of the Kafka mirror: hooks, operators, DAG factory (see plugins/README.md)."""

import sys
from pathlib import Path

# Airflow puts plugins/ on sys.path, not the repo root: mirror_worker and spark_jobs live there.
_REPO_ROOT = str(Path(__file__).resolve().parents[2])
if _REPO_ROOT not in sys.path:
    sys.path.append(_REPO_ROOT)
