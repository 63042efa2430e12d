"""A development host (DJANGO_DEBUG=1) answers loopback callers only (issue 33 item 7).

DEBUG pages list every URL pattern and show tracebacks with settings, and a development checkout
may run on the well-known fallback SECRET_KEY: none of that is for the network. The Host header
proves nothing (a caller on the LAN can send `Host: localhost`), so the check is on the
connection's peer address as the ASGI server reports it (`make run` passes --no-proxy-headers).
Settings refuse non-loopback ALLOWED_HOSTS under DEBUG too; `make run` refuses a non-loopback HOST.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

REFUSAL = b"This development host (DJANGO_DEBUG=1) answers loopback callers only.\n"
# Loopback names a development host may be addressed by (RFC 6761: *.localhost is loopback too).
LOOPBACK_HOST_NAMES = ("localhost", ".localhost", "[::1]")


def is_loopback_address(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def is_loopback_host_name(name: str) -> bool:
    """An ALLOWED_HOSTS entry that can only name this machine ("*" and any other name cannot)."""
    name = name.strip().lower()
    if name in LOOPBACK_HOST_NAMES or name.endswith(".localhost"):
        return True
    return is_loopback_address(name.removeprefix("[").removesuffix("]"))


def _from_loopback(scope: Scope) -> bool:
    client = scope.get("client")
    if not client:
        return True  # a Unix socket: only this machine can connect
    return is_loopback_address(str(client[0]))


def loopback_only(app: ASGIApp) -> ASGIApp:
    """ASGI: HTTP from a non-loopback peer gets a plain 403, before any view or DEBUG page."""

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _from_loopback(scope):
            headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(REFUSAL)).encode())]
            await send({"type": "http.response.start", "status": 403, "headers": headers})
            await send({"type": "http.response.body", "body": REFUSAL})
            return
        await app(scope, receive, send)

    return application
