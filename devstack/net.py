"""Loopback ports: pick free ones, tell whether something listens."""

import fcntl
import os
import random
import socket
import tempfile
import time
from pathlib import Path

# Ports this process handed out, each with the open file whose lock reserves it against other processes (pytest
# workers pick ports side by side). A port is only taken by its user's bind, often much later (the stack
# configures both brokers, then starts them): until then nothing else keeps it free.
_handed_out: dict[int, int] = {}
_random = random.Random()


def locks_folder(uid: int) -> Path:
    """One folder per user: a folder another user made (mode 0755, files 0644 under the usual umask) would refuse
    this user's lock files. Users do not see each other's reservations; the bind test still skips a bound port."""
    return Path(tempfile.gettempdir()) / f"devstack-ports-{uid}"


_LOCKS = locks_folder(os.getuid())


def _ephemeral_low() -> int | None:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _candidates() -> range | None:
    """Ports below the kernel's ephemeral range. A port from inside it (what a bind to port 0 gives) can be
    taken by any outgoing connection's source port between the pick and the server's bind, and was: a test
    broker failed with "Address already in use" in a full run."""
    low = _ephemeral_low()
    if low is None or low - 1024 < 2000:
        return None
    return range(max(1024, low - 12000), low)


def _reserve(port: int) -> bool:
    """Lock the port's file for this process's life; False if another process holds it."""
    _LOCKS.mkdir(exist_ok=True)
    fd = os.open(_LOCKS / str(port), os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _handed_out[port] = fd
    return True


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port() -> int:
    """A loopback port nothing listens on, below the ephemeral range where the kernel says where that is, never
    one this process handed out before, nor one another process of this machine reserved with this function."""
    candidates = _candidates()
    for _ in range(1000):
        port = _random.choice(candidates) if candidates else _kernel_port()
        # Reserved first, then tried: a port something is bound to stays reserved, never handed out.
        if port not in _handed_out and _reserve(port) and _bindable(port):
            return port
    raise RuntimeError("no free loopback port found in 1000 tries")


def is_listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_closed(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while is_listening(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True
