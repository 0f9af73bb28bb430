"""The batch plane's surface for the other planes: what the Airflow provider (`plugins/`) and the benchmarks
(`bench/`) use of `spark_jobs`, and nothing else of it (`tests/unit/test_import_graph.py` checks that they, the
DAGs and the local stack import this package only through here). The jobs themselves are named, not imported:
the operators submit the modules `spark_jobs.catchup` and `spark_jobs.consistency_check` by name. Importing this
module imports neither pyspark nor a job.

- submitting a job (the Airflow operators): `kafka_connector` (how the check gets Spark's Kafka connector and its
  JVM digest reader: jars for `--jars`, or Maven coordinates for `--packages`; spark_jobs/common/connector.py),
  `project_zip` (the installed `mirror_worker` and `spark_jobs` zipped for
  `--py-files`), `APPLICATION_FILE_ENV` (the variable naming the file where a job writes its Spark application's
  id, master, UI and event log), `THROUGHPUT_JVM_OPTIONS` (the driver JVM options the consistency check wants)
- the Spark security posture both the jobs and the operators apply (spark_jobs/common/cluster_security.py):
  `secured_conf` (what to add to a submission's conf, or `UnprotectedCredentials`), `mirror_secrets` (a mirror's
  credential settings), `spark_defaults` (the spark-defaults.conf spark-submit reads)
- the catch-up's copy, run without Spark (bench/catchup_copy_cpu.py): `CopyTask` (one source partition's range
  and where it goes), `CopySettings` (what every task shares: client settings, batch, commits), `copy_task` (a
  task's copy of its range), `COPY_CONSUMER` (the copy's consumer settings on top of the worker's)
"""

from spark_jobs.catchup.copy_range import COPY_CONSUMER, CopySettings, CopyTask, copy_task
from spark_jobs.common.cluster_security import UnprotectedCredentials, mirror_secrets, secured_conf, spark_defaults
from spark_jobs.common.connector import kafka_connector
from spark_jobs.common.session import APPLICATION_FILE_ENV, THROUGHPUT_JVM_OPTIONS, project_zip

__all__ = [
    "APPLICATION_FILE_ENV", "COPY_CONSUMER", "CopySettings", "CopyTask", "THROUGHPUT_JVM_OPTIONS",
    "UnprotectedCredentials", "copy_task", "kafka_connector", "mirror_secrets", "project_zip", "secured_conf",
    "spark_defaults",
]
