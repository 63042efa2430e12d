"""A loopback HTTP server for the bench's client tests (wrk's post.lua, the retention probe)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def answering(respond: Callable[[str, Message, bytes], bytes]) -> Iterator[str]:
    """Answers every GET and POST 200 with `respond(path, headers, body)` (body b"" when none was
    sent); yields the server's URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"])) if "Content-Length" in self.headers else b""
            payload = respond(self.path, self.headers, body)
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
