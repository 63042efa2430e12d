"""Pinned httpx transports and the one-shot delivery request (webhooks.md §Egress).

How the pin works: httpx and httpcore keep doing HTTP and TLS; only the TCP connect is ours. The
network backends below receive the URL's hostname from httpcore's connection pool, call
`egress.egress_addresses` (resolve now, check every answer) and open the socket to one of those
checked addresses, by IP. httpcore then starts TLS on that socket with server_hostname = the URL's
hostname, so SNI and certificate verification use the name, and the Host header is the URL's.
Nothing resolves the name again between the check and the connect, so a DNS answer that changes
(rebinding) cannot move the connection. The pool keys connections by (scheme, hostname, port): a
kept-alive connection is reused only for the same hostname, and it went to an address that was
checked when it was opened.

Redirects are never followed (interop.md §A2A push delivery; webhooks.md: a 3xx is a failed
delivery). `egress_request` sends through the transport with no client at all, and the transports
also drop `Location` from every 3xx, so even an `httpx.Client(follow_redirects=True)` cannot follow.

Environment proxies are never used: the transports build their own pool and egress_request uses no
client, so `HTTPS_PROXY` cannot reroute a checked connection.

Plain http (only while OPENWOP_EGRESS_ALLOW_HTTP_CIDRS names a range) is judged at connect like
everything else: the transport tells the backend, through `_CONNECT_SCHEME`, which scheme the
connection it is opening will carry, and an http connection goes only to addresses in those ranges.

`egress_request` has an overall deadline: httpx times each read, so a receiver that drips a byte
per read would otherwise hold an attempt for ever. Every socket operation of its one connection
(connect, TLS handshake, each write and read of headers and body) gets at most the time left.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import certifi
import httpcore
import httpx
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from apps.core import egress
from apps.core.egress import EgressRefused, sanitize_url

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
MAX_BODY_BYTES = 64 * 1024
DEFAULT_LIMITS = httpx.Limits()
USER_AGENT = "openwop-host"
# At most this many checked addresses are tried before giving up on a connect.
MAX_CONNECT_ADDRESSES = 4
# The overall deadline of one `egress_request` whose caller names none and sets no timeouts.
DEFAULT_DEADLINE_SECONDS = 30.0

# The scheme of the request whose connection the backend is opening (set by the transports around
# the pool call). Unset reads as plain http, the stricter check: fail closed.
_CONNECT_SCHEME: contextvars.ContextVar[str] = contextvars.ContextVar("egress_connect_scheme", default="http")


# --- trust ---------------------------------------------------------------------------------------


def egress_ssl_context() -> ssl.SSLContext:
    """certifi's CA store plus `settings.OPENWOP_EGRESS_CA_BUNDLE` (PEM path), hostname checked."""
    bundle = str(getattr(settings, "OPENWOP_EGRESS_CA_BUNDLE", "") or "")
    stamp = 0
    if bundle:
        try:
            stamp = os.stat(bundle).st_mtime_ns
        except OSError:
            raise ImproperlyConfigured(f"OPENWOP_EGRESS_CA_BUNDLE: cannot read {bundle!r}") from None
    return _ssl_context(bundle, stamp)


@functools.lru_cache(maxsize=8)
def _ssl_context(bundle: str, _stamp: int) -> ssl.SSLContext:
    # Cached per (path, mtime): loading certifi costs milliseconds and deliveries are frequent.
    context = ssl.create_default_context(cafile=certifi.where())
    if bundle:
        context.load_verify_locations(cafile=bundle)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    return context


# --- the pinned connect ----------------------------------------------------------------------------


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore.ConnectTimeout("connect deadline passed")
    return left


def _earliest(*deadlines: float | None) -> float | None:
    known = [d for d in deadlines if d is not None]
    return min(known) if known else None


class _DeadlineStream(httpcore.NetworkStream):
    """A stream whose every operation gets at most the time left before the attempt's deadline.

    CPython bounds a whole TLS handshake and a whole sendall by the socket timeout, and a read
    returns what has arrived, so each operation ends by the deadline however the peer drips."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: float) -> None:
        self._stream = stream
        self._deadline = deadline

    def _bound(self, timeout: float | None, expired: type[Exception]) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise expired("the attempt's deadline passed")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._bound(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._bound(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        tls = self._stream.start_tls(ssl_context, server_hostname, self._bound(timeout, httpcore.ConnectTimeout))
        return _DeadlineStream(tls, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _PinnedBackend(httpcore.NetworkBackend):
    """Sync sockets that only ever connect to addresses `egress_addresses` just checked; with a
    `deadline` (time.monotonic()), every stream it opens ends its operations by then."""

    def __init__(self, deadline: float | None = None) -> None:
        self._sockets = httpcore.SyncBackend()
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = egress.egress_addresses(host, port, plain_http=_CONNECT_SCHEME.get() != "https")
        deadline = _earliest(None if timeout is None else time.monotonic() + timeout, self._deadline)
        failure: Exception | None = None
        for address in addresses[:MAX_CONNECT_ADDRESSES]:
            try:
                stream = self._sockets.connect_tcp(
                    str(address),
                    port,
                    timeout=_remaining(deadline),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
                continue
            return stream if self._deadline is None else _DeadlineStream(stream, self._deadline)
        assert failure is not None
        raise failure

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise EgressRefused(egress.REASON_HOST, "unix sockets are not an egress destination")

    def sleep(self, seconds: float) -> None:
        self._sockets.sleep(seconds)


# --- request and response rules ------------------------------------------


def _guard_request(request: httpx.Request) -> None:
    """URL rules on what httpx will actually send (its parse, not the caller's string)."""
    url = request.url
    if (refusal := egress.scheme_refusal(url.scheme)) is not None:
        raise refusal
    if url.userinfo:
        raise EgressRefused(egress.REASON_USERINFO)
    egress.egress_check_origin(scheme=url.scheme, host=url.raw_host.decode("ascii"), port=url.port, resolve=False)
    # Host is the URL's authority, whatever the caller passed; the certificate is checked against
    # the URL's hostname, never a caller-chosen SNI name.
    request.headers["Host"] = url.netloc.decode("ascii")
    request.extensions = {key: value for key, value in request.extensions.items() if key != "sni_hostname"}


def _drop_redirect_target(response: httpx.Response) -> httpx.Response:
    if 300 <= response.status_code < 400 and "location" in response.headers:
        del response.headers["location"]
    return response


def _pinned_pool(transport: object, pool: type, context: ssl.SSLContext, limits: httpx.Limits, backend: Any) -> Any:
    """The pool that replaces `transport._pool`: the same limits, connecting through `backend`."""
    # httpx's transports send through `self._pool`; if a release renames it, replacing it would
    # silently unpin every request. Refuse to build rather than run unpinned.
    if not isinstance(getattr(transport, "_pool", None), pool):
        raise RuntimeError("httpx transport internals changed: cannot install the egress pin")
    return pool(
        ssl_context=context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        http1=True,
        http2=False,
        network_backend=backend,
    )


class EgressTransport(httpx.HTTPTransport):
    """An httpx.HTTPTransport whose every connection is checked and pinned (see module doc).
    `deadline` (a time.monotonic() instant) bounds every connection it opens."""

    def __init__(self, *, limits: httpx.Limits = DEFAULT_LIMITS, deadline: float | None = None) -> None:
        context = egress_ssl_context()
        super().__init__(verify=context, trust_env=False, limits=limits)
        self._pool = _pinned_pool(self, httpcore.ConnectionPool, context, limits, _PinnedBackend(deadline))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        _guard_request(request)
        scheme = _CONNECT_SCHEME.set(request.url.scheme)
        try:
            return _drop_redirect_target(super().handle_request(request))
        finally:
            _CONNECT_SCHEME.reset(scheme)


def egress_transport() -> httpx.BaseTransport:
    """For `httpx.Client(transport=egress_transport(), follow_redirects=False)`."""
    return EgressTransport()


# --- one delivery attempt ------------------------------------------------------------------------------


@dataclass(frozen=True)
class EgressResponse:
    """The outcome of one attempt that was allowed to start.

    `ok` is a 2xx answer. A 3xx is `redirected` and not ok; its Location was never fetched.
    `error` names why no answer came (`timeout`, `tls`, `connect`, `protocol`); status_code is then None.
    """

    status_code: int | None
    ok: bool
    redirected: bool
    error: str | None
    body: bytes = b""
    body_truncated: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    elapsed_seconds: float = 0.0


def _failure_kind(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            return "tls"
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, httpx.ConnectError):
        return "connect"
    return "protocol"


def _read_capped(stream: Iterable[bytes], limit: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    for chunk in stream:
        if size + len(chunk) > limit:
            chunks.append(chunk[: limit - size])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def _default_deadline(timeout: float | httpx.Timeout) -> float:
    limits = httpx.Timeout(timeout)
    parts = [limits.connect, limits.write, limits.read, limits.read]
    return sum(part for part in parts if part is not None) if any(parts) else DEFAULT_DEADLINE_SECONDS


def egress_request(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    content: bytes | None = None,
    timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
    deadline_seconds: float | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> EgressResponse:
    """One outbound attempt through the guard (sync; for Celery tasks).

    `timeout` bounds each operation; `deadline_seconds` the whole attempt (connect, TLS, writing
    the request, reading headers and body): past it the attempt ends as a `timeout`, or, when the
    status line had come, with the body read so far. Unnamed, it is what the per-operation
    timeouts allow a well-behaved peer (connect, write, then a read each for headers and body).

    Raises EgressRefused when the guard refuses (nothing was sent). Otherwise returns the outcome,
    failures included. No client is involved: no redirects, cookies, env proxies, or httpx's INFO
    log line (which prints the full URL, query and all).
    """
    safe_url = sanitize_url(url)
    started = time.monotonic()
    try:
        egress.egress_check_url(url, resolve=False)  # the strict string grammar; DNS happens at connect
        outbound = httpx.Headers({key: value for key, value in headers.items() if key.lower() != "host"})
        if "accept-encoding" not in outbound:
            outbound["Accept-Encoding"] = "identity"  # the capped body is then the body
        if "user-agent" not in outbound:
            outbound["User-Agent"] = USER_AGENT
        try:
            request = httpx.Request(
                method,
                url,
                headers=outbound,
                content=content,
                extensions={"timeout": httpx.Timeout(timeout).as_dict()},
            )
        except httpx.InvalidURL:
            # Our grammar accepted it but httpx reads it differently: refuse rather than guess.
            raise EgressRefused(egress.REASON_MALFORMED, "httpx could not parse the URL") from None
        deadline = started + (deadline_seconds if deadline_seconds is not None else _default_deadline(timeout))
        with EgressTransport(limits=httpx.Limits(max_keepalive_connections=0), deadline=deadline) as transport:
            response = transport.handle_request(request)
            try:
                try:
                    body, truncated = _read_capped(response.stream, max_body_bytes)  # type: ignore[arg-type]
                except httpx.HTTPError:
                    # The status line is the receiver's answer; a body that stalls is only diagnostics.
                    body, truncated = b"", True
            finally:
                response.close()
    except EgressRefused as exc:
        logger.warning("egress refused %s %s: %s", method, safe_url, exc.log_detail)
        raise
    except httpx.HTTPError as exc:
        kind = _failure_kind(exc)
        logger.info("egress %s %s failed: %s", method, safe_url, kind)
        return EgressResponse(
            status_code=None, ok=False, redirected=False, error=kind, elapsed_seconds=time.monotonic() - started
        )
    status = response.status_code
    logger.debug("egress %s %s answered %s", method, safe_url, status)
    return EgressResponse(
        status_code=status,
        ok=200 <= status < 300,
        redirected=300 <= status < 400,
        error=None,
        body=body,
        body_truncated=truncated,
        headers=dict(response.headers),
        elapsed_seconds=time.monotonic() - started,
    )
