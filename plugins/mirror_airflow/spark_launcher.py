"""The spark-submit application of the Spark operators: runs one of spark_jobs/ as `__main__` and writes
its exit code to an outcome file, so the operator learns 0/1/2/3 (ok, inconsistent or failed, bad input,
data loss or could not complete) from a file rather than from the text of the hook's exception.

    spark-submit ... spark_launcher.py --outcome FILE spark_jobs/JOB.py [JOB ARGS...]

The outcome file is `{"job": "JOB.py", "exit_code": N}`, written when the job ends whatever way, and the
launcher exits with the job's code. It imports nothing of Airflow (it runs in the Spark driver); Airflow's
plugin loader may import this module, which does nothing unless it is run as a script.
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


def run_job(script: str, args: list[str]) -> int:
    """Runs the script as `python SCRIPT ARGS` would: its folder first on sys.path (instead of ours)."""
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != here]
    sys.path.insert(0, str(Path(script).resolve().parent))
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return exit_code_of(exc)
    except Exception:  # what the interpreter would do with it: print it, exit 1
        traceback.print_exc()
        return 1
    return 0


def write_outcome(path: Path, script: str, code: int) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps({"job": Path(script).name, "exit_code": code}))
    os.replace(temporary, path)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != OUTCOME_FLAG:
        print(f"usage: spark_launcher.py {OUTCOME_FLAG} FILE JOB.py [ARGS...]", file=sys.stderr)
        return 2
    outcome, script, args = Path(argv[1]), argv[2], argv[3:]
    code = run_job(script, args)
    write_outcome(outcome, script, code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
