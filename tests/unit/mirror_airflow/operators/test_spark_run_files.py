"""The files a Spark job writes later by name live in a private directory of the run (issue 46 item 8)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from mirror_airflow.operators.spark import CatchupOperator, ConsistencyCheckOperator


def test_the_outcome_and_application_files_are_named_inside_a_new_private_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_T", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    seen = set()
    for kind in (ConsistencyCheckOperator, CatchupOperator):
        op = kind(task_id="t", spec_path="/s/m.yaml", mirror_name="orders", conn_id="spark_t", report_dir=str(tmp_path))
        try:
            op.prepare({"params": {}})
            run_dir = op.outcome_path.parent
            assert run_dir != Path(tempfile.gettempdir()) and run_dir not in seen
            assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700 and run_dir.stat().st_uid == os.getuid()
            assert op.application_path.parent == run_dir and not op.outcome_path.exists()
            assert op.application_args[:2] == ["--outcome", str(op.outcome_path)]
            seen.add(run_dir)
        finally:
            if op.shipped_dir is not None:
                shutil.rmtree(op.shipped_dir, ignore_errors=True)
