"""The spark-submit application of the Spark operators: runs one of the spark_jobs modules as `__main__` (as
`python -m spark_jobs.JOB` would) and writes its exit code to an outcome file, so the operator learns 0/1/2/3
(ok, inconsistent or failed, bad input, data loss or could not complete) from a file rather than from the text
of the hook's exception.

    spark-submit ... --py-files kafka-mirror.zip spark_launcher.py --outcome FILE spark_jobs.JOB [JOB ARGS...]

The outcome file is `{"job": "spark_jobs.JOB", "exit_code": N}`, written when the job ends whatever way, and
the launcher exits with the job's code. It imports nothing of Airflow (it runs in the Spark driver); Airflow's
plugin loader may import this module, which does nothing unless it is run as a script. spark-submit runs it
as a script, whose folder Python would put first on sys.path (its modules shadowing top-level names): the
operators start it with PYTHONSAFEPATH=1, which leaves the folder out.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback
from pathlib import Path

OUTCOME_FLAG = "--outcome"


def exit_code_of(exc: SystemExit) -> int:
    """The process exit code a SystemExit gives (None 0, an int itself, anything else 1 after printing it)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def run_job(module: str, args: list[str]) -> int:
    """Runs the module as `python -m MODULE ARGS` would."""
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exit_code_of(exc)
    except Exception:  # what the interpreter would do with it: print it, exit 1
        traceback.print_exc()
        return 1
    return 0


def write_outcome(path: Path, module: str, code: int) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps({"job": module, "exit_code": code}))
    os.replace(temporary, path)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != OUTCOME_FLAG:
        print(f"usage: spark_launcher.py {OUTCOME_FLAG} FILE MODULE [ARGS...]", file=sys.stderr)
        return 2
    outcome, module, args = Path(argv[1]), argv[2], argv[3:]
    code = run_job(module, args)
    write_outcome(outcome, module, code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
