"""Loopback ports: pick free ones, tell whether something listens."""

import socket
import time


# Ports this process handed out. A port is only reserved by its user's bind, often much later (the stack
# configures both brokers, then starts them): the kernel may give the same free port twice meanwhile, and did
# (both brokers of a test session got 57051; the second could not bind, while the first answered for it).
_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, never one this process handed out before."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


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
