"""Errors of the Airflow control plane. Bad configuration derives from mirror_worker's ConfigError."""

from mirror_worker.api import ConfigError, MirrorError


class MirrorSpecError(ConfigError):
    """A mirror of the spec (or its `airflow:` section) is invalid: its DAG file fails to import."""


class ConnectionConfigError(ConfigError):
    """An Airflow connection cannot give a Kafka or registry client (e.g. no bootstrap.servers)."""


class WorkerFailedError(MirrorError):
    """The supervised mirror worker exited with a non-zero code: the task fails and is retried."""

    def __init__(self, mirror: str, code: int, stderr_tail: str) -> None:
        self.mirror, self.code, self.stderr_tail = mirror, code, stderr_tail
        detail = f": {stderr_tail}" if stderr_tail else ""
        super().__init__(f"mirror worker {mirror!r} exited with code {code}{detail}")
