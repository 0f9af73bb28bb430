"""The consistency check: prove, record by record, that a mirror copied a window of its source. `job` holds the
parser and `main` (`python -m spark_jobs.check`, or the entry module `spark_jobs.consistency_check`); `plan`,
`window` and `modes` decide what is compared and how; `digests`, `digest_rows`, `jvm`, `rdkafka` and
`rdkafka_spark` are the digest pass; `records` and `compacted` the exact comparison; `report` writes the report.
Nothing is imported here: an executor that unpickles a task imports only the modules that task needs."""
