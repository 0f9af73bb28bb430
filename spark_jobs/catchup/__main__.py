"""`python -m spark_jobs.catchup`: runs the catch-up's `main` (spark_jobs/catchup/job.py) and exits with its code;
the Airflow operators' launcher runs this module as `__main__` too."""

import sys

from spark_jobs.catchup.job import main

if __name__ == "__main__":
    sys.exit(main())
