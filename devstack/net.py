"""Loopback ports: pick free ones, tell whether something listens."""

import socket
import time


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
