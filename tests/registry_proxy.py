"""A test-only HTTPS front for a real registry that requires HTTP basic auth: what a production registry behind
TLS with authentication looks like to the mirror. It forwards every request to the registry it fronts and
records the Authorization headers it saw."""

from __future__ import annotations

import base64
import ssl
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class AuthenticatingProxy:
    def __init__(self, upstream: str, user: str, password: str, server_pem: Path) -> None:
        """`upstream`: the registry's base URL; `server_pem`: the server's key and certificate chain (PEM)."""
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.refused: list[str] = []
        self.accepted = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self):
                if self.headers.get("Authorization") != expected:
                    proxy.refused.append(self.path)
                    self.send_response(401)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"error_code": 401, "message": "Unauthorized"}')
                    return
                proxy.accepted += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "authorization", "content-length", "connection")}
                request = urllib.request.Request(upstream.rstrip("/") + self.path, data=body, method=self.command,
                                                 headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=30) as reply:
                        status, content, kind = reply.status, reply.read(), reply.headers.get("Content-Type")
                except urllib.error.HTTPError as exc:
                    status, content, kind = exc.code, exc.read(), exc.headers.get("Content-Type")
                self.send_response(status)
                self.send_header("Content-Type", kind or "application/json")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_PUT = do_DELETE = _forward

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(server_pem)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
