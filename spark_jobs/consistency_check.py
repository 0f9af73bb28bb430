"""The consistency check's entry module: `python -m spark_jobs.consistency_check` (as the Airflow operators and the
docs run it) runs `main` of spark_jobs/check/job.py, where the check, its flags and its rules live, and exits with
its code (0 consistent, 1 inconsistent, 2 bad input, 3 could not complete). `python -m spark_jobs.check` and the
console script `kafka-mirror-consistency-check` run the same `main`."""

import sys

from spark_jobs.check.job import main

if __name__ == "__main__":
    sys.exit(main())
