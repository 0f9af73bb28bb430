"""Toxiproxy (Shopify), the TCP proxy that puts faults between clients and brokers.

One server holds many proxies (one per broker), made through its API while it runs. They live only in
the server's memory, so they are also kept in `<home>/proxies.json`, which the server reads at start
(`-config`): a restart brings them back with their listen ports. Toxics (latency, cuts, ...) are set through the HTTP API
(`devstack/toxics.py`) and are never persisted.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devstack import paths
from devstack.errors import SetupMissingError, StackError, StartupTimeoutError
from devstack.net import free_port, is_listening, wait_closed
from devstack.process import ManagedProcess


@dataclass
class ToxiproxyServer:
    home: Path

    def __post_init__(self) -> None:
        self.process = ManagedProcess("toxiproxy", self.home)

    @property
    def _node_file(self) -> Path:
        return self.home / "node.json"

    @property
    def _proxies_file(self) -> Path:
        return self.home / "proxies.json"

    @property
    def port(self) -> int:
        return json.loads(self._node_file.read_text())["port"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def configure(self) -> None:
        if self._node_file.is_file():
            return
        self.home.mkdir(parents=True, exist_ok=True)
        self._proxies_file.write_text("[]")
        self._node_file.write_text(json.dumps({"port": free_port()}))

    def proxies(self) -> dict[str, dict]:
        """name -> {name, listen, upstream, enabled}, as configured (not the running server's state)."""
        if not self._proxies_file.is_file():
            return {}
        return {proxy["name"]: proxy for proxy in json.loads(self._proxies_file.read_text())}

    def add_proxy(self, name: str, upstream: str, attempts: int = 5) -> str:
        """A proxy on a free loopback port to `upstream` (kept if it exists); its listen address.

        Made on the running server, which binds the port at once: a port taken since it was picked (by
        anyone's outgoing connection too) is then replaced before anything is told about it.
        """
        proxies = self.proxies()
        if name in proxies:
            return proxies[name]["listen"]
        for attempt in range(attempts):
            proxy = {"name": name, "listen": f"127.0.0.1:{free_port()}", "upstream": upstream, "enabled": True}
            try:
                self.api("POST", "/proxies", proxy)
                break
            except StackError as exc:
                if "address already in use" not in str(exc) or attempt == attempts - 1:
                    raise
        self._proxies_file.write_text(json.dumps([*proxies.values(), proxy], indent=2))
        return proxy["listen"]

    def api(self, method: str, path: str, body: dict | None = None) -> dict | list | None:
        """One call of the HTTP API; its JSON answer (None when empty). An error status raises StackError."""
        request = urllib.request.Request(
            self.url + path, method=method, data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            answer = " ".join(exc.read().decode(errors="replace").split())  # one line, whatever the body
            raise StackError(f"toxiproxy {method} {path}: HTTP {exc.code} {answer[:300]}") from exc
        return json.loads(text) if text.strip() else None

    def start(self) -> None:
        self.configure()
        if self.process.is_running():
            return
        if not paths.TOXIPROXY_SERVER.is_file():
            raise SetupMissingError(
                f"toxiproxy-server missing at {paths.TOXIPROXY_SERVER}: run `make setup-test`")
        ports = [self.port] + [int(p["listen"].rsplit(":", 1)[1]) for p in self.proxies().values()]
        for port in ports:
            if is_listening(port):
                raise StackError(f"toxiproxy: port {port} is taken by another process")
        self.process.start([
            str(paths.TOXIPROXY_SERVER), "-host", "127.0.0.1", "-port", str(self.port),
            "-config", str(self._proxies_file),
        ])

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the API answers with every configured proxy."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.process.is_running():
                raise StackError(f"toxiproxy exited during start-up; see {self.process.log_file}")
            unopened = [line for line in self.process.log_file.read_text().splitlines() if "Failed to populate" in line]
            if unopened:
                raise StackError(f"toxiproxy could not open its proxies: {unopened[-1]}")
            try:
                if set(self.api("GET", "/proxies")) >= set(self.proxies()):
                    return
            except (OSError, StackError):
                pass
            time.sleep(0.2)
        raise StartupTimeoutError(f"toxiproxy did not answer on {self.url} within {timeout:.0f}s; "
                                  f"see {self.process.log_file}")

    def stop(self, timeout: float = 10.0) -> None:
        self.process.stop(timeout)
        if self._node_file.is_file():
            wait_closed(self.port, 10.0)
