"""The doors' two Redis round trips, spoken in RESP straight from the event loop.

Every A2A and MCP request counts itself against its key's rate window (apps/core/rate_limits.py),
and every committed host-event batch wakes its stream's subscribers (apps/core/sse.py). redis-py's
asyncio client spends a pipeline, a pool checkout and a response parser per call (bench/README.md);
written as bytes on one connection per event loop, replies matched to callers in order (RESP
answers in order), those commands cost a few microseconds.

Only what those callers need is spoken: a plain `redis://` URL (host, port, optional password and
database), integer / status / nil replies. Anything else (TLS, a unix socket) gets `None` from
`resp_client`, and the caller keeps using redis-py. Failures raise `ConnectionError` (or
`RedisReplyError` for an error reply); the callers fail open on either.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from urllib.parse import unquote, urlsplit


class RedisReplyError(Exception):
    """Redis answered `-ERR ...`."""


_NIL = object()


def _command(*parts: bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)


class _Protocol(asyncio.Protocol):
    """One connection: commands written in order, each reply settles the oldest waiter.

    What the callers of one loop iteration send goes out in one write, at the end of that
    iteration (`send` queues, `_flush` writes): one system call for every request the iteration
    started, not one each."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiters: deque[asyncio.Future[object]] = deque()
        self.buffer = bytearray()
        self.outgoing = bytearray()  # commands queued in this loop iteration, not yet written
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        error = ConnectionError(f"redis connection lost: {exc}" if exc else "redis connection closed")
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.waiters:
            parsed = self._reply()
            if parsed is None:
                return  # incomplete: wait for more bytes
            value, used = parsed
            del self.buffer[:used]
            waiter = self.waiters.popleft()
            if waiter.done():
                continue  # its caller timed out or was cancelled
            if isinstance(value, RedisReplyError):
                waiter.set_exception(value)
            else:
                waiter.set_result(value)
        if self.buffer:  # a reply nobody asked for: the stream is out of step, never trust it again
            self.abort()

    def _reply(self) -> tuple[object, int] | None:
        """(value, bytes used) of the first complete simple reply in the buffer, else None."""
        end = self.buffer.find(b"\r\n")
        if end < 0:
            return None
        kind, line = self.buffer[:1], bytes(self.buffer[1:end])
        if kind == b":":
            return int(line), end + 2
        if kind == b"+":
            return line, end + 2
        if kind == b"-":
            return RedisReplyError(line.decode("utf-8", "replace")), end + 2
        if kind == b"$":
            size = int(line)
            if size < 0:
                return _NIL, end + 2
            if len(self.buffer) < end + 2 + size + 2:
                return None
            return bytes(self.buffer[end + 2 : end + 2 + size]), end + 2 + size + 2
        self.abort()  # arrays and the rest are never asked for
        return None

    def send(self, payload: bytes, replies: int) -> list[asyncio.Future[object]]:
        if self.closed or self.transport is None:
            raise ConnectionError("redis connection closed")
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(replies)]
        self.waiters.extend(futures)
        if not self.outgoing:
            loop.call_soon(self._flush)
        self.outgoing += payload
        return futures

    def _flush(self) -> None:
        payload = bytes(self.outgoing)
        self.outgoing.clear()
        if self.transport is not None and not self.closed:
            self.transport.write(payload)  # closed meanwhile: connection_lost failed its waiters

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self.closed = True


def _expire(protocol: _Protocol, waiter: asyncio.Future[object]) -> None:
    """The reply is late: drop the connection (a late reply must never be taken for the next
    caller's), which fails every waiter on it."""
    if not waiter.done():
        protocol.abort()
        protocol.connection_lost(TimeoutError("no reply in time"))


class RespClient:
    """One event loop's connection to one Redis, reopened on the next call after it is lost."""

    def __init__(self, host: str, port: int, password: str | None, username: str | None, db: int,
                 connect_timeout: float | None, timeout: float | None) -> None:  # fmt: skip
        self._address = (host, port)
        self._auth = [p.encode() for p in (username, password) if p] if password else []
        self._db = db
        self._connect_timeout = connect_timeout
        self._timeout = timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None

    async def _connection(self) -> _Protocol:
        protocol = self._protocol
        if protocol is not None and not protocol.closed:
            return protocol
        if self._connecting is not None:  # one connect for every caller that finds none
            return await asyncio.shield(self._connecting)
        loop = asyncio.get_running_loop()
        connecting: asyncio.Future[_Protocol] = loop.create_future()
        self._connecting = connecting
        opened: _Protocol | None = None
        try:
            _, made = await asyncio.wait_for(loop.create_connection(_Protocol, *self._address), self._connect_timeout)
            opened = made
            setup: list[bytes] = []
            if self._auth:
                setup.append(_command(b"AUTH", *self._auth))
            if self._db:
                setup.append(_command(b"SELECT", str(self._db).encode()))
            if setup:
                for waiter in made.send(b"".join(setup), len(setup)):
                    await asyncio.wait_for(waiter, self._timeout)
        except BaseException as exc:
            if opened is not None:
                opened.abort()
            failure = ConnectionError(f"redis connect failed: {type(exc).__name__}")
            connecting.set_exception(failure)
            connecting.exception()  # retrieved: nobody else may be waiting
            self._connecting = None
            if isinstance(exc, Exception):
                raise failure from exc
            raise
        self._protocol = made
        connecting.set_result(made)
        self._connecting = None
        return made

    async def _last(self, payload: bytes, replies: int) -> object:
        """Write `payload` (`replies` commands); the last reply (earlier ones must not be errors)."""
        protocol = self._protocol
        if protocol is None or protocol.closed:
            protocol = await self._connection()
        futures = protocol.send(payload, replies)
        last = futures[-1]
        # One timer for the whole write (replies come in order: the last settles after the rest);
        # asyncio.wait_for would cost more than the round trip's own work.
        timer = None
        if self._timeout:
            timer = asyncio.get_running_loop().call_later(self._timeout, _expire, protocol, last)
        try:
            value = await last
        except BaseException:
            for future in futures[:-1]:  # their fate is the connection's: nobody reads them now
                if future.done() and not future.cancelled():
                    future.exception()
                else:
                    future.cancel()
            raise
        finally:
            if timer is not None:
                timer.cancel()
        for future in futures[:-1]:
            future.result()  # an error reply to an earlier command raises here
        return value

    async def window_incr(self, key: str, ttl_seconds: int) -> int:
        """`SET key 0 EX ttl NX` then `INCR key`, in one write: the count after this request."""
        raw = key.encode()
        payload = _command(b"SET", raw, b"0", b"EX", str(ttl_seconds).encode(), b"NX") + _command(b"INCR", raw)
        value = await self._last(payload, 2)
        assert isinstance(value, int)
        return value

    async def exists(self, key: bytes) -> bool:
        value = await self._last(_command(b"EXISTS", key), 1)
        return bool(value)


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, RespClient | None]] = (
    weakref.WeakKeyDictionary()
)


def resp_client(url: str, *, connect_timeout: float | None = None, timeout: float | None = None) -> RespClient | None:
    """The running loop's client for `url`, or None when the URL asks for more than this speaks."""
    loop = asyncio.get_running_loop()
    per_loop = _clients.get(loop)
    if per_loop is None:
        per_loop = _clients[loop] = {}
    if url in per_loop:
        return per_loop[url]
    client = None
    parts = urlsplit(url)
    path = parts.path.strip("/")
    if parts.scheme == "redis" and parts.hostname and (path == "" or path.isdigit()) and not parts.query:
        client = RespClient(
            parts.hostname, parts.port or 6379, unquote(parts.password) if parts.password else None,
            unquote(parts.username) if parts.username else None, int(path or 0), connect_timeout, timeout,
        )  # fmt: skip
    per_loop[url] = client
    return client
