"""An Airflow auth manager with per-DAG permissions for the session's api-server (tests/airflow_support.py):
SimpleAuthManager, whose roles grant every DAG alike, narrowed for the users a rules file names, as a FAB role
or any per-DAG auth manager would narrow them. Airflow loads it by AIRFLOW__CORE__AUTH_MANAGER; the dashboard
asks it through Airflow's own `is_authorized_dag`, exactly as it asks the installed one.

Rules file ($MIRROR_TEST_AUTH_RULES, JSON, read on every check so a test can change it):
    {"user": {"dags": ["mirror__a", ...], "logs": ["mirror__a"]}}
A named user may read only the DAGs under "dags" and the task logs of those under "logs"; users not named
keep their SimpleAuthManager role's permissions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

RULES_ENV = "MIRROR_TEST_AUTH_RULES"


def _rules() -> dict:
    path = os.environ.get(RULES_ENV)
    if not path or not Path(path).is_file():
        return {}
    return json.loads(Path(path).read_text())


class PerDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        allowed = super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
        rules = _rules().get(user.get_name())
        if not allowed or rules is None:
            return allowed
        if details is None or details.id is None:
            return False  # "every DAG": a narrowed user never has that
        if access_entity == DagAccessEntity.TASK_LOGS:
            return details.id in rules.get("logs", [])
        return details.id in rules.get("dags", [])
