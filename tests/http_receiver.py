"""A local alert receiver for notifier tests: an HTTP server on 127.0.0.1 that records each POST."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """An HTTP server on 127.0.0.1 that records every POST (path, JSON body, arrival time)."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict, float]] = []
        received = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append((self.path, json.loads(body), time.monotonic()))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def bodies(self) -> list[dict]:
        return [body for _, body, _ in self.posts]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
