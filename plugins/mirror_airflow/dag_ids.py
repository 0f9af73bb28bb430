"""The DAG ids of a mirror, in one place: the DAG files build them, and the dashboard checks a user's
permissions on them (each DAG's data is shown only to whoever may read that DAG)."""

from __future__ import annotations


def lifecycle_dag_id(name: str) -> str:
    """The DAG that runs the mirror's workers (its pause state is the mirror's)."""
    return f"mirror__{name}"


def mirror_dag_id(name: str, kind: str) -> str:
    """`mirror__NAME__KIND`: the lag, verify, catchup, failover and failback DAGs."""
    return f"{lifecycle_dag_id(name)}__{kind}"


def lag_dag_id(name: str) -> str:
    return mirror_dag_id(name, "lag")


def verify_dag_id(name: str) -> str:
    return mirror_dag_id(name, "verify")
