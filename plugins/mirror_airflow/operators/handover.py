"""Stopping and resuming a mirror from another DAG: pause the lifecycle DAG and wait for the mirror's group
to empty (before the catch-up's Spark copy, or a failover's offset writes), and unpause it afterwards
(only when this run paused it, and never a failed-over mirror). A failover's stop marks the mirror failed
over first and refuses while a catch-up holds the mirror's lease group (mirror_worker/dr/failover_mark.py)."""

from __future__ import annotations

import time

from mirror_airflow.hooks.airflow_api import api_from_connection
from mirror_airflow.operators.base import MirrorOperator


def group_members(admin, group_id: str, timeout_s: float = 10.0) -> int:
    """Active members of a consumer group (0 when it is empty or unknown); waits for a coordinator."""
    from mirror_worker.api import active_members

    return active_members(admin, group_id, timeout_s)


class StopMirrorOperator(MirrorOperator):
    """Stops the mirror gracefully: pauses the lifecycle DAG (REST API), whose worker tasks then stop with
    their offsets committed, and waits until the mirror's group has no active member. Without `airflow_api` it only waits, and tells the user to pause.
    XCom: {"paused_here": bool} so the resume task unpauses only what this run paused.

    `failover`: the failover's stop. It marks the mirror failed over, then waits (up to `wait_timeout_s`)
    for a running catch-up's lease group to empty and refuses past that (removing the mark it set: nothing
    was failed over). Without it (the catch-up's stop) a failed-over mirror is refused."""

    def __init__(self, *, lifecycle_dag_id: str, api_conn_id: str = "airflow_api", wait_timeout_s: float = 180.0,
                 failover: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        if wait_timeout_s <= 0:
            raise ValueError(f"{self.task_id}: wait_timeout_s must be positive")
        self.lifecycle_dag_id = lifecycle_dag_id
        self.api_conn_id = api_conn_id
        self.wait_timeout_s = wait_timeout_s
        self.failover = failover

    def execute(self, context) -> dict:
        from mirror_worker.api import MirrorError, failed_over, mark_failed_over, refuse_if_failed_over, unmark

        destination, group = self.destination_admin(), self.mirror.group_id
        deadline = time.monotonic() + self.wait_timeout_s
        if not self.failover:
            try:
                refuse_if_failed_over(destination, group, "a catch-up")
            except MirrorError as exc:
                raise RuntimeError(str(exc)) from None
            return self._stop(deadline)
        marked_here = not failed_over(destination, group)
        mark_failed_over(destination, group, self.mirror.topic_creation)  # first: a catch-up or worker starting from now on sees it
        try:
            self._wait_for_catchups(deadline)
            return self._stop(deadline)
        except BaseException:
            if marked_here:
                unmark(destination, group)
            raise

    def _wait_for_catchups(self, deadline: float) -> None:
        from mirror_worker.api import lease_group

        group = self.mirror.group_id
        for source, admin in self.source_admins():
            while (members := group_members(admin, lease_group(group))) > 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"a catch-up holds mirror group {group!r} on source {source!r} (its lease group "
                        f"{lease_group(group)!r} has {members} active member(s) after {self.wait_timeout_s:.0f} s): "
                        "let it finish, then fail over")
                self.log.info("waiting for the catch-up of group %s to end: %d lease member(s)", group, members)
                time.sleep(2)

    def _stop(self, deadline: float) -> dict:
        api = api_from_connection(self.api_conn_id, self.log)
        paused_here = False
        if api is not None and not api.is_paused(self.lifecycle_dag_id):
            api.set_paused(self.lifecycle_dag_id, True)
            paused_here = True
            self.log.info("paused %s: its worker stops within a pause check and a graceful stop", self.lifecycle_dag_id)
        group = self.mirror.group_id
        for source, admin in self.source_admins():
            while (members := group_members(admin, group)) > 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"mirror group {group!r} on source {source!r} still has {members} active member(s) after "
                        f"{self.wait_timeout_s:.0f} s: pause DAG {self.lifecycle_dag_id} (or stop its worker) first"
                    )
                self.log.info("waiting for group %s to empty: %d active member(s)", group, members)
                time.sleep(2)
        return {"paused_here": paused_here}


class ResumeMirrorOperator(MirrorOperator):
    """Unpauses the lifecycle DAG when the catch-up run paused it: the worker resumes at the range ends."""

    def __init__(self, *, lifecycle_dag_id: str, stop_task_id: str = "stop_mirror", api_conn_id: str = "airflow_api",
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.lifecycle_dag_id = lifecycle_dag_id
        self.stop_task_id = stop_task_id
        self.api_conn_id = api_conn_id

    def execute(self, context) -> bool:
        from mirror_worker.api import failed_over, mark_topic

        state = context["ti"].xcom_pull(task_ids=self.stop_task_id) or {}
        if not state.get("paused_here"):
            self.log.info("%s was not paused by this run: left as it is (unpause it to resume mirroring)",
                          self.lifecycle_dag_id)
            return False
        if failed_over(self.destination_admin(), self.mirror.group_id):
            self.log.warning("%s stays paused: mirror %s was failed over meanwhile (topic %s on the destination); "
                             "delete that topic to mirror from the source again", self.lifecycle_dag_id,
                             self.mirror_name, mark_topic(self.mirror.group_id))
            return False
        api = api_from_connection(self.api_conn_id, self.log)
        if api is None:
            raise RuntimeError(f"cannot unpause {self.lifecycle_dag_id}: connection {self.api_conn_id!r} is gone")
        api.set_paused(self.lifecycle_dag_id, False)
        self.log.info("unpaused %s: the worker resumes from the offsets the catch-up committed", self.lifecycle_dag_id)
        return True
