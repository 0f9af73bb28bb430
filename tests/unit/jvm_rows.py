"""The JVM digest reader's window rows (java/check/src/mirror/check/WindowRows.java) behind the signatures of
spark_jobs/check/rdkafka.py's source_window_rows and destination_window_rows, through one long-lived
`java mirror.check.RowsCli` process (no Kafka, no Spark): the same unit tests then hold both readers."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pyspark

from spark_jobs.check.jvm import scope_json
from spark_jobs.common.connector import kafka_connector


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _records(batches) -> list:
    return [[m.offset(), _b64(m.key()), _b64(m.value()), [[n, _b64(v)] for n, v in (m.headers() or [])]]
            for batch in batches for m in batch]


class JvmRows:
    def __init__(self) -> None:
        jars = [*kafka_connector({}).jars, str(Path(pyspark.__file__).parent / "jars" / "*")]
        if not any(j.endswith("mirror-check.jar") for j in jars):
            raise FileNotFoundError("mirror-check.jar is missing: run `make setup`")
        self.process = subprocess.Popen(["java", "-Xmx128m", "-cp", ":".join(jars), "mirror.check.RowsCli"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def _ask(self, request: dict) -> list[tuple]:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"mirror.check.RowsCli exited with {self.process.wait()}")
        return [tuple(row) for row in json.loads(line)]

    def source_window_rows(self, batches, t: int, p: int, window: int, committed: int | None) -> list[tuple]:
        return self._ask({"side": "source", "t": t, "p": p, "window": window, "committed": committed,
                          "records": _records(batches)})

    def destination_window_rows(self, batches, dp: int, scope) -> list[tuple]:
        return self._ask({"side": "destination", "dp": dp, "window": scope.window, "scope": scope_json(scope),
                          "records": _records(batches)})

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(10)
