"""Batch plane: PySpark jobs (catch-up, consistency check) over the mirror's clusters, in three rooms.

- `spark_jobs.catchup`: the catch-up, which copies a mirror's backlog in parallel and hands over to the worker
  (job: parser and main; plan: where each partition starts; driver: the driver's copy while Spark starts;
  spark: one Spark task per range; copy_range: a task's copy; eos: the exactly-once mirror's transactions).
- `spark_jobs.check`: the consistency check, source against destination record by record (job: parser and
  main; plan, window, modes: what to compare and how; digests, digest_rows, jvm, rdkafka, rdkafka_spark: the
  digest pass; records, compacted: the exact comparison; report: the JSON and HTML report).
- `spark_jobs.common`: what both jobs share (session: the SparkSession, its jars and the shipped code;
  job_config: the mirror target; kafka_meta: driver-side metadata; stable_offsets: the last-stable-offset rules).

Entry points: `python -m spark_jobs.catchup` (console script `kafka-mirror-catchup`), and `python -m
spark_jobs.consistency_check` or `python -m spark_jobs.check` (console script `kafka-mirror-consistency-check`).
Other planes (the Airflow provider, the benchmarks) import this package only through `spark_jobs.api`;
`spark_jobs/jars/` holds the check's JVM digest reader (package data, built by `make setup`).
"""
