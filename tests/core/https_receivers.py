"""Real HTTPS receivers on loopback for the egress tests (and, later, push/webhook tests).

A receiver is a ThreadingHTTPServer whose accepted sockets are wrapped in TLS in the handler
thread, serving a certificate from a test CA (trustme). It records every request (method, path,
headers, body) and the SNI name each TLS handshake carried. `TcpTrap` is a bare listener that only
counts accepted connections: the address a request must never reach.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import trustme


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Behaviour:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    hang: bool = False
    fail_first: int = 0  # answer 500 to this many requests first, then `status` (a receiver that recovers)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], context: ssl.SSLContext | None, behaviour: Behaviour) -> None:
        super().__init__(address, _Handler)
        self.context = context  # None: plain http
        self.behaviour = behaviour
        self.received: list[Received] = []
        self.sni_names: list[str | None] = []
        self.handshake_failures = 0
        self.release = threading.Event()
        if context is not None:
            context.sni_callback = self._on_sni

    def _on_sni(self, sslobj: Any, name: str | None, context: ssl.SSLContext) -> None:
        self.sni_names.append(name)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # Handshake in the handler thread, so a client that aborts TLS never stalls accept().
        if self.context is None:
            super().finish_request(request, client_address)
            return
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            self.handshake_failures += 1
            return
        super().finish_request(tls, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (timeout test) is expected, not a failure to print


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.received.append(Received(self.command, self.path, dict(self.headers.items()), body))
        behaviour = self.server.behaviour
        if behaviour.hang:
            self.server.release.wait(30)
            return
        failing = len(self.server.received) <= behaviour.fail_first
        self.send_response(500 if failing else behaviour.status)
        for name, value in behaviour.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(behaviour.body)))
        self.end_headers()
        self.wfile.write(behaviour.body)

    do_GET = do_POST = do_PUT = _answer


@dataclass
class Receiver:
    server: _Server
    port: int

    @property
    def received(self) -> list[Received]:
        return self.server.received

    @property
    def sni_names(self) -> list[str | None]:
        return self.server.sni_names

    @property
    def behaviour(self) -> Behaviour:
        return self.server.behaviour


@contextmanager
def https_receiver(
    ca: trustme.CA, hostname: str, *, bind: str = "127.0.0.1", behaviour: Behaviour | None = None
) -> Iterator[Receiver]:
    """An HTTPS server on `bind` presenting a certificate for `hostname` signed by `ca`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(hostname).configure_cert(context)
    with _serving(_Server((bind, 0), context, behaviour or Behaviour())) as receiver:
        yield receiver


@contextmanager
def http_receiver(*, bind: str = "127.0.0.1", behaviour: Behaviour | None = None) -> Iterator[Receiver]:
    """A plain-http receiver on `bind` (what OPENWOP_EGRESS_ALLOW_HTTP_CIDRS may admit)."""
    with _serving(_Server((bind, 0), None, behaviour or Behaviour())) as receiver:
        yield receiver


@contextmanager
def _serving(server: _Server) -> Iterator[Receiver]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Receiver(server=server, port=server.server_address[1])
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


class TcpTrap:
    """A listener that never answers: where traffic must not go.

    It never calls accept() while a test runs; the kernel completes any TCP handshake into the
    backlog, and `connections()` counts them afterwards, so nothing is missed to a race.
    """

    def __init__(self, bind: str, port: int = 0) -> None:
        self._socket = socket.create_server((bind, port), backlog=16)
        self.port: int = self._socket.getsockname()[1]

    def connections(self) -> int:
        self._socket.setblocking(False)
        count = 0
        while True:
            try:
                connection, _ = self._socket.accept()
            except BlockingIOError:
                return count
            count += 1
            connection.close()

    def close(self) -> None:
        self._socket.close()
