"""Receivers on loopback that answer one byte at a time (issue 33, item 15).

Each byte comes well within any per-read timeout, so only an overall deadline ends an attempt
against them. Both count connections (and the most open at once) and note each client that hung up
while they were still dripping: that, not a clock, is what the deadline tests assert.

- `dripping_receiver`: an HTTPS server that reads the request, then drips its headers
  (`phase="headers"`) or its body (`phase="body"`) for `drip_for` seconds before finishing.
- `dripping_proxy`: a TCP relay in front of a real receiver that passes the client's bytes at once
  and the server's one at a time, so even the TLS handshake drips.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import trustme

INTERVAL = 0.05


@dataclass
class DripStats:
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    hung_up: int = 0  # clients that closed while the drip was still going
    requests: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def opened(self) -> None:
        with self.lock:
            self.connections += 1
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)

    def closed(self, *, hung_up: bool) -> None:
        with self.lock:
            self.open_now -= 1
            self.hung_up += int(hung_up)


@dataclass
class Dripping:
    port: int
    stats: DripStats


def _drip(sink: socket.socket, data: bytes, *, until: float, stop: threading.Event) -> bool:
    """Send `data` a byte at a time (cycling) until `until`. False if the peer went away first."""
    index = 0
    while time.monotonic() < until and not stop.is_set():
        try:
            sink.sendall(data[index % len(data) : index % len(data) + 1])
        except OSError:
            return False
        index += 1
        time.sleep(INTERVAL)
    return True


def _read_request(tls: ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = tls.recv(4096)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = tls.recv(4096)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@contextmanager
def dripping_receiver(
    ca: trustme.CA, hostname: str, *, phase: str = "headers", drip_for: float = 15.0
) -> Iterator[Dripping]:
    assert phase in {"headers", "body"}
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(hostname).configure_cert(context)
    listener = socket.create_server(("127.0.0.1", 0))
    stats, stop = DripStats(), threading.Event()

    def serve(raw: socket.socket) -> None:
        stats.opened()
        finished = False
        try:
            with context.wrap_socket(raw, server_side=True) as tls:
                request = _read_request(tls)
                with stats.lock:
                    stats.requests.append(request)
                until = time.monotonic() + drip_for
                if phase == "headers":
                    tls.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
                    finished = _drip(tls, b"a", until=until, stop=stop)
                    if finished:
                        tls.sendall(b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                else:
                    tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\nConnection: close\r\n\r\n")
                    finished = _drip(tls, b"b", until=until, stop=stop)
        except OSError:
            finished = False
        finally:
            stats.closed(hung_up=not finished and not stop.is_set())

    with _accepting(listener, serve, stop):
        yield Dripping(listener.getsockname()[1], stats)


@contextmanager
def dripping_proxy(target_port: int, *, drip_for: float = 15.0) -> Iterator[Dripping]:
    listener = socket.create_server(("127.0.0.1", 0))
    stats, stop = DripStats(), threading.Event()

    def serve(client: socket.socket) -> None:
        stats.opened()
        client_gone = threading.Event()
        finished = False
        try:
            with client, socket.create_connection(("127.0.0.1", target_port)) as server:

                def upstream() -> None:  # the client's bytes go through at once
                    with suppress(OSError):
                        while chunk := client.recv(4096):
                            server.sendall(chunk)
                    client_gone.set()

                threading.Thread(target=upstream, daemon=True).start()
                until = time.monotonic() + drip_for
                server.settimeout(INTERVAL)
                pending = b""
                while time.monotonic() < until and not stop.is_set() and not client_gone.is_set():
                    if not pending:
                        with suppress(TimeoutError):
                            pending = server.recv(4096)
                            if not pending:
                                break
                        continue
                    try:
                        client.sendall(pending[:1])
                    except OSError:
                        client_gone.set()
                        break
                    pending = pending[1:]
                    time.sleep(INTERVAL)
                finished = not client_gone.is_set()
        except OSError:
            finished = False
        finally:
            stats.closed(hung_up=not finished and not stop.is_set())

    with _accepting(listener, serve, stop):
        yield Dripping(listener.getsockname()[1], stats)


@contextmanager
def _accepting(listener: socket.socket, serve: object, stop: threading.Event) -> Iterator[None]:
    listener.settimeout(0.1)  # close() does not wake a blocked accept(): poll the stop flag

    def accept_forever() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.settimeout(None)
            threading.Thread(target=serve, args=(connection,), daemon=True).start()  # type: ignore[arg-type]

    threading.Thread(target=accept_forever, daemon=True).start()
    try:
        yield
    finally:
        stop.set()
        listener.close()
