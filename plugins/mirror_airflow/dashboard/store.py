"""A bounded history of lag samples and lag-sensor verdicts per mirror, in one SQLite file.

Written by the lag sensor's runs (every sample it takes, every verdict it reaches) and by the dashboard
itself when a page is viewed and the newest sample is older than `min_interval_s`. Bounded twice: rows
older than `keep_s` go, and each mirror keeps at most `max_samples` sample rows and `max_verdicts`
verdicts (oldest dropped first). The file lives under $AIRFLOW_HOME unless $MIRROR_DASHBOARD_DB names one.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from mirror_airflow.lag.rules import PartitionKey, Sample

DB_ENV = "MIRROR_DASHBOARD_DB"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    mirror TEXT NOT NULL, time REAL NOT NULL, source TEXT NOT NULL, topic TEXT NOT NULL,
    partition INTEGER NOT NULL, committed INTEGER, high INTEGER NOT NULL, low INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS samples_by_mirror ON samples (mirror, time);
CREATE TABLE IF NOT EXISTS verdicts (
    mirror TEXT NOT NULL, time REAL NOT NULL, status TEXT NOT NULL, summary TEXT NOT NULL,
    total_lag INTEGER, origin TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS verdicts_by_mirror ON verdicts (mirror, time);
"""


@dataclass(frozen=True)
class Verdict:
    time: float
    status: str  # a lag_rules.Status value, or ERROR when the sensor could not measure
    summary: str
    total_lag: int | None
    origin: str  # who judged: "lag sensor"


def default_path() -> Path:
    if os.environ.get(DB_ENV):
        return Path(os.environ[DB_ENV])
    home = Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")
    return home / "mirror-dashboard" / "history.sqlite"


class HistoryStore:
    def __init__(self, path: Path | None = None, keep_s: float = 6 * 3600, max_samples: int = 50_000,
                 max_verdicts: int = 100, clock=time.time) -> None:
        self.path = Path(path or default_path())
        self.keep_s = keep_s
        self.max_samples = max_samples
        self.max_verdicts = max_verdicts
        self.clock = clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db, db:
            db.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        # Several processes write (the api-server, lag-sensor tasks): wait for the lock rather than fail.
        return sqlite3.connect(self.path, timeout=10)

    # --- samples ---------------------------------------------------------------------------------
    def add_samples(self, mirror: str, samples: Iterable[tuple[PartitionKey, Sample]]) -> int:
        rows = [(mirror, s.time, src, topic, part, s.committed, s.high, s.low) for (src, topic, part), s in samples]
        with closing(self._connect()) as db, db:
            db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            self._trim(db, "samples", mirror, self.max_samples)
        return len(rows)

    def samples(self, mirror: str, since: float | None = None) -> dict[PartitionKey, list[Sample]]:
        """Per partition, its samples oldest first (only those at or after `since`)."""
        query = "SELECT time, source, topic, partition, committed, high, low FROM samples WHERE mirror = ?"
        args: list = [mirror]
        if since is not None:
            query += " AND time >= ?"
            args.append(since)
        out: dict[PartitionKey, list[Sample]] = {}
        with closing(self._connect()) as db:
            for when, src, topic, part, committed, high, low in db.execute(query + " ORDER BY time", args):
                out.setdefault((src, topic, part), []).append(Sample(when, committed, high, low))
        return out

    def newest_sample_time(self, mirror: str) -> float | None:
        with closing(self._connect()) as db:
            return db.execute("SELECT MAX(time) FROM samples WHERE mirror = ?", (mirror,)).fetchone()[0]

    def newest_sample_times(self) -> dict[str, float]:
        """mirror -> its newest sample's time, for every mirror with samples (one query for the overview)."""
        with closing(self._connect()) as db:
            return dict(db.execute("SELECT mirror, MAX(time) FROM samples GROUP BY mirror"))

    # --- verdicts --------------------------------------------------------------------------------
    def add_verdict(self, mirror: str, verdict: Verdict) -> None:
        with closing(self._connect()) as db, db:
            db.execute("INSERT INTO verdicts VALUES (?, ?, ?, ?, ?, ?)", (
                mirror, verdict.time, verdict.status, verdict.summary, verdict.total_lag, verdict.origin))
            self._trim(db, "verdicts", mirror, self.max_verdicts)

    def verdicts(self, mirror: str, limit: int = 10) -> list[Verdict]:
        """The newest first."""
        with closing(self._connect()) as db:
            rows = db.execute("SELECT time, status, summary, total_lag, origin FROM verdicts WHERE mirror = ? "
                              "ORDER BY time DESC LIMIT ?", (mirror, limit)).fetchall()
        return [Verdict(*row) for row in rows]

    # --- bounds ----------------------------------------------------------------------------------
    def _trim(self, db: sqlite3.Connection, table: str, mirror: str, max_rows: int) -> None:
        db.execute(f"DELETE FROM {table} WHERE time < ?", (self.clock() - self.keep_s,))
        db.execute(f"DELETE FROM {table} WHERE mirror = ? AND rowid NOT IN "
                   f"(SELECT rowid FROM {table} WHERE mirror = ? ORDER BY time DESC, rowid DESC LIMIT ?)",
                   (mirror, mirror, max_rows))

    def count(self, table: str, mirror: str) -> int:
        if table not in ("samples", "verdicts"):
            raise ValueError(table)
        with closing(self._connect()) as db:
            return db.execute(f"SELECT COUNT(*) FROM {table} WHERE mirror = ?", (mirror,)).fetchone()[0]
