"""Operators of the mirror DAGs, one module per role:

- `base`: MirrorOperator (spec, mirror, Kafka clients from the spec or from `kafka` connections)
- `topics`: DiscoverTopicsOperator, EnsureDestinationTopicsOperator
- `schemas`: SyncSchemasOperator
- `worker`: MirrorWorkerOperator (process supervision in mirror_airflow.supervisor)
- `handover`: StopMirrorOperator, ResumeMirrorOperator
- `spark`: ConsistencyCheckOperator, CatchupOperator (SparkSubmitOperator)
- `failover`: FailoverImpactOperator, ApplyTranslatedOffsetsOperator, FailoverReportOperator
"""

from mirror_airflow.hooks.airflow_api import AirflowApi, api_from_connection
from mirror_airflow.operators.base import MirrorOperator
from mirror_airflow.operators.failover import (
    ApplyTranslatedOffsetsOperator, FailoverImpactOperator, FailoverReportOperator,
)
from mirror_airflow.operators.handover import ResumeMirrorOperator, StopMirrorOperator, group_members
from mirror_airflow.operators.schemas import SyncSchemasOperator
from mirror_airflow.operators.spark import CatchupOperator, ConsistencyCheckOperator, MirrorSparkJob
from mirror_airflow.operators.topics import DiscoverTopicsOperator, EnsureDestinationTopicsOperator
from mirror_airflow.operators.worker import MirrorWorkerOperator
from mirror_airflow.supervisor import REPO_ROOT, Action, next_action, pause_check_due

__all__ = [
    "REPO_ROOT", "Action", "AirflowApi", "ApplyTranslatedOffsetsOperator", "CatchupOperator",
    "ConsistencyCheckOperator", "DiscoverTopicsOperator", "EnsureDestinationTopicsOperator", "FailoverImpactOperator",
    "FailoverReportOperator", "MirrorOperator", "MirrorSparkJob", "MirrorWorkerOperator", "ResumeMirrorOperator",
    "StopMirrorOperator", "SyncSchemasOperator", "api_from_connection", "group_members", "next_action",
    "pause_check_due",
]
