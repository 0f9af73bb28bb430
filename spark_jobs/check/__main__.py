"""`python -m spark_jobs.check`: runs the consistency check's `main` (spark_jobs/check/job.py) and exits with its
code, as `python -m spark_jobs.consistency_check` does."""

import sys

from spark_jobs.check.job import main

if __name__ == "__main__":
    sys.exit(main())
