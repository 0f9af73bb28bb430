"""Operators of the mirror DAGs, one module per role:

- `base`: MirrorOperator (spec, mirror, Kafka clients from the spec or from `kafka` connections)
- `topics`: DiscoverTopicsOperator, EnsureDestinationTopicsOperator
- `schemas`: SyncSchemasOperator
- `worker`: MirrorWorkerOperator (process supervision in mirror_airflow.supervisor)
- `handover`: StopMirrorOperator, ResumeMirrorOperator
- `spark`: ConsistencyCheckOperator, CatchupOperator (SparkSubmitOperator)
- `failover`: FailoverImpactOperator, ApplyTranslatedOffsetsOperator, FailoverReportOperator
"""
