"""The catch-up: copy a mirror's backlog in parallel with Spark, then hand over to the worker with no gap and no
overlap. `job` holds the parser and `main` (`python -m spark_jobs.catchup` runs it through `__main__`), `plan`
decides where each partition starts, `driver` copies on the driver while Spark starts, `spark` runs one Spark task
per range, `copy_range` is a task's copy, `eos` the exactly-once mirror's transactions. Nothing is imported here:
an executor that unpickles a task imports only the modules that task needs."""
