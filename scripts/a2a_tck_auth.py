"""A pytest plugin that gives the A2A TCK a bearer key and keeps it on loopback (loaded by
scripts/a2a-tck.sh).

The TCK (a2aproject/a2a-tck, branch 1.0-dev) sends no credentials, while this host authenticates
every A2A exchange (interop.md §Negotiation is a protocol: "MUST be authenticated"). Every request
the TCK makes goes through an `httpx.Client` (the module-level `httpx.get/post` build one too), so
giving each new client a default `Authorization` header authenticates all of them without changing
a line of the TCK. The key is read from A2A_TCK_BEARER and never printed. The TCK's webhook
receiver binds 0.0.0.0 by default; it is bound to 127.0.0.1 here, where the host under test runs.

The TCK's `tck_id(name)` returns one id per name for the whole session, so every scenario that
sends `tck-complete-task-...` sends the same messageId, and this host's messageId de-duplication
(a messageId names one message: a second task cannot reuse it) answers the later ones "already sent
to another task" and the TCK skips them (the push delivery and history scenarios among them). Each
call gets a fresh suffix here, keeping the prefix the fixture workflow routes on
(A2A_TCK_UNIQUE_IDS=0 turns this off).
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
from typing import Any

import httpx


def _with_bearer(init: Any, token: str) -> Any:
    @functools.wraps(init)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> None:
        headers = httpx.Headers(kwargs.pop("headers", None))
        headers.setdefault("Authorization", f"Bearer {token}")
        init(self, *args, headers=headers, **kwargs)

    return wrapped


def _grpc_with_bearer(token: str) -> None:
    """Every gRPC channel the TCK opens (`grpc.insecure_channel`) sends `authorization: Bearer`
    with each call, unless the call names its own."""
    try:
        import grpc
    except ImportError:  # a TCK without its gRPC transport
        return

    class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):  # type: ignore[misc]
        def _details(self, details: Any) -> Any:
            metadata = list(details.metadata or ())
            if not any(key == "authorization" for key, _ in metadata):
                metadata.append(("authorization", f"Bearer {token}"))
            return details._replace(metadata=metadata) if hasattr(details, "_replace") else _Details(details, metadata)

        def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            return continuation(self._details(details), request)

        def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
            return continuation(self._details(details), request)

    class _Details(grpc.ClientCallDetails):  # type: ignore[misc]
        def __init__(self, details: Any, metadata: list[tuple[str, str]]) -> None:
            self.method = details.method
            self.timeout = details.timeout
            self.metadata = metadata
            self.credentials = details.credentials
            self.wait_for_ready = getattr(details, "wait_for_ready", None)
            self.compression = getattr(details, "compression", None)

    insecure_channel = grpc.insecure_channel

    @functools.wraps(insecure_channel)
    def channel(*args: Any, **kwargs: Any) -> Any:
        return grpc.intercept_channel(insecure_channel(*args, **kwargs), _Bearer())

    grpc.insecure_channel = channel


def _unique_tck_ids() -> None:
    try:
        from tck.requirements import base
    except ImportError:
        return
    session_id = base.tck_id
    counter = itertools.count(1)

    @functools.wraps(session_id)
    def unique(name: str) -> str:
        return f"{session_id(name)}-{next(counter)}"

    base.tck_id = unique
    # Modules that imported the function by name before this ran (the TCK's conftest files).
    for module in list(sys.modules.values()):
        if getattr(module, "tck_id", None) is session_id:
            module.tck_id = unique


def pytest_configure(config: Any) -> None:
    if os.environ.get("A2A_TCK_UNIQUE_IDS", "1") != "0":
        _unique_tck_ids()
    token = os.environ.get("A2A_TCK_BEARER", "")
    if not token:
        raise RuntimeError("A2A_TCK_BEARER is not set: the host refuses unauthenticated A2A requests.")
    httpx.Client.__init__ = _with_bearer(httpx.Client.__init__, token)  # type: ignore[method-assign]
    httpx.AsyncClient.__init__ = _with_bearer(httpx.AsyncClient.__init__, token)  # type: ignore[method-assign]
    _grpc_with_bearer(token)
    try:
        from tck.webhook.server import WebhookReceiver  # the TCK checkout is the working directory
    except ImportError:
        return
    init = WebhookReceiver.__init__

    @functools.wraps(init)
    def loopback(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("host", "127.0.0.1")
        init(self, *args, **kwargs)

    WebhookReceiver.__init__ = loopback  # type: ignore[method-assign]
