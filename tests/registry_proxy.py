"""An HTTP proxy in front of a schema registry that a test can cut (503) and restore, so a registry outage
is simulated without stopping the shared registry."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class RegistryProxy:
    def __init__(self, upstream: str) -> None:
        """upstream: the registry's base URL, e.g. http://127.0.0.1:8081/apis/ccompat/v7"""
        scheme_host, _, path = upstream.partition("://")[2].partition("/")
        self.upstream_root = f"{upstream.split('://')[0]}://{scheme_host}"
        self.base_path = "/" + path
        self.cut = threading.Event()
        self.requests_refused = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if proxy.cut.is_set():
                    proxy.requests_refused += 1
                    self._reply(503, b'{"error_code":50301,"message":"registry cut by the test"}',
                                "application/json")
                    return
                request = urllib.request.Request(proxy.upstream_root + self.path, data=body, method=self.command)
                for name in ("Content-Type", "Accept"):
                    if self.headers.get(name):
                        request.add_header(name, self.headers[name])
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        self._reply(response.status, response.read(), response.headers.get("Content-Type"))
                except urllib.error.HTTPError as exc:
                    self._reply(exc.code, exc.read(), exc.headers.get("Content-Type"))

            def _reply(self, status: int, payload: bytes, content_type: str | None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type or "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = _forward

            def log_message(self, *_args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{self.base_path}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RegistryProxy:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.server.shutdown()
        self.server.server_close()
