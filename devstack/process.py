"""Background processes that outlive the command that started them.

Each process runs in its own session (so its process group id equals its pid) and records its pid in
`<home>/pid`. A pid is only trusted while `/proc/<pid>/cmdline` still names `home`: a recycled pid
never gets signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from devstack.errors import StackError


def _proc_state(pid: int) -> str | None:
    """The one-letter state from /proc/<pid>/stat, or None when the pid does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    return stat[stat.rindex(")") + 2]


def is_alive(pid: int) -> bool:
    """True while the pid exists and is not a zombie."""
    return _proc_state(pid) not in (None, "Z", "X")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _stable_cmdline(pid: int, attempts: int = 20) -> str:
    """The command line, read again while it comes back empty: a live process always has one, but a
    read that races with the process (exec, exit) can return nothing."""
    for _ in range(attempts):
        cmdline = _cmdline(pid)
        if cmdline or not is_alive(pid):
            return cmdline
        time.sleep(0.05)
    return ""


def rss_mib(pid: int) -> float:
    """Resident set size of one process in MiB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0.0


@dataclass
class ManagedProcess:
    """One long-running server process owned by the stack, identified by its home directory."""

    name: str
    home: Path

    @property
    def pid_file(self) -> Path:
        return self.home / "pid"

    @property
    def log_file(self) -> Path:
        return self.home / "server.log"

    def pid(self) -> int | None:
        """The pid of the running process, or None if it is not running."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if not is_alive(pid):
            return None
        child = _children.get(pid)
        if child is not None and child.poll() is None:
            return pid  # started here and not reaped: the pid cannot belong to anyone else
        if str(self.home) not in _stable_cmdline(pid):
            return None
        return pid

    def is_running(self) -> bool:
        return self.pid() is not None

    def exited(self) -> bool:
        """Whether the process is gone. For a process started here, its exit status decides (its pid
        stays reserved until it is reaped), not the command line, which a starting program may
        rewrite (setproctitle)."""
        try:
            child = _children.get(int(self.pid_file.read_text().strip()))
        except (FileNotFoundError, ValueError):
            child = None
        if child is not None:
            return child.poll() is not None
        return not self.is_running()

    def exit_report(self) -> str:
        """Why the process is not running, as far as this process can tell (for error messages)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return "no pid file"
        child = _children.get(pid)
        if child is not None and child.poll() is not None:
            return f"pid {pid} exited with status {child.returncode}"
        if is_alive(pid):
            return f"pid {pid} runs {_cmdline(pid)[:200]!r}, which does not name {self.home}"
        return f"pid {pid} is gone"

    def start(self, argv: list[str], env: dict[str, str | None] | None = None) -> int:
        """Start argv detached from this process; argv must mention `home` (see module doc). `env` is added to
        this process's environment; a None value leaves that variable out."""
        if self.is_running():
            raise StackError(f"{self.name} is already running (pid {self.pid()})")
        if not any(str(self.home) in arg for arg in argv):
            raise StackError(f"{self.name}: command line must name its home {self.home}")
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                argv,
                cwd=self.home,
                env={k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        # Keep a reference so that the child is reaped if it dies while we are still alive.
        _children[proc.pid] = proc
        _note_started(self.home)
        return proc.pid

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the whole process tree, SIGKILL what is left after `timeout` seconds.

        The tree is the server's process group plus every descendant that moved to a group of its own
        (Airflow puts each task in one): all of them are signalled at once.
        """
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return
        tree = _tree_groups(pid)
        for group in tree:
            _signal_group(group, signal.SIGTERM)
        if not self._wait_gone(pid, timeout, tree):
            for group in tree | _tree_groups(pid):
                _signal_group(group, signal.SIGKILL)
            if not self._wait_gone(pid, 10.0, tree):
                raise StackError(f"{self.name} (pid {pid}) did not exit after SIGKILL")
        self.pid_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL the whole process tree at once (a crash, for fault tests)."""
        pid = self.pid()
        if pid is not None:
            tree = _tree_groups(pid)
            for group in tree:
                _signal_group(group, signal.SIGKILL)
            self._wait_gone(pid, 10.0, tree)
        self.pid_file.unlink(missing_ok=True)

    def _wait_gone(self, pid: int, timeout: float, groups: set[int] = frozenset()) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            child = _children.get(pid)
            if child is not None:
                child.poll()
            if not is_alive(pid):
                _children.pop(pid, None)
                return all(_group_gone(group, deadline) for group in {pid, *groups})
            time.sleep(0.1)
        return False


_children: dict[int, subprocess.Popen] = {}

# Where a test process notes the home of each server it starts (one line each): the test run's controller
# (tests/conftest.py) kills, from these, what a test process that crashed left running. Unset: nothing noted.
STARTED_LOG_ENV = "DEVSTACK_STARTED_LOG"


def _note_started(home: Path) -> None:
    path = os.environ.get(STARTED_LOG_ENV)
    if path:
        with open(path, "a") as log:
            log.write(f"{home}\n")


def kill_started(log: Path, keep: Path | None = None) -> list[str]:
    """SIGKILL every server noted in `log` (STARTED_LOG_ENV) that still runs, but those under `keep`; returns
    their names (homes). A server is found by its home's pid file and trusted only while its command line
    names the home, as everywhere here."""
    killed = []
    try:
        homes = dict.fromkeys(line.strip() for line in log.read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return killed
    for home in homes:
        if keep is not None and Path(home).is_relative_to(keep):
            continue
        process = ManagedProcess("left running", Path(home))
        if process.is_running():
            process.kill()
            killed.append(home)
    return killed


def _process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group id) of every live process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] not in ("Z", "X"):
            table[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return table


def descendants(pid: int) -> list[int]:
    """`pid` and every live process below it."""
    table = _process_table()
    found, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, (ppid, _) in table.items() if ppid == parent]
        found += children
        frontier += children
    return found


def _tree_groups(pid: int) -> set[int]:
    """The process groups of `pid` and its descendants (groups they made themselves included).

    The server runs in a session of its own, and a process can only join or create groups inside its
    session: no group outside the tree is ever returned.
    """
    table = _process_table()
    return {pid} | {table[p][1] for p in descendants(pid) if p in table}


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_gone(pgid: int, deadline: float) -> bool:
    """Wait until no process of the group is left (children of the server included)."""
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        # Only zombies of our own left? They cannot be signalled further; treat as gone.
        if _only_zombies(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _only_zombies(pgid: int) -> bool:
    return all(group != pgid for _, group in _process_table().values())
