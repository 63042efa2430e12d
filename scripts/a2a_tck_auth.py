"""A pytest plugin that gives the A2A TCK a bearer key and keeps it on loopback (loaded by
scripts/a2a-tck.sh).

The TCK (a2aproject/a2a-tck, branch 1.0-dev) sends no credentials, while this host authenticates
every A2A exchange (interop.md §Negotiation is a protocol: "MUST be authenticated"). Every request
the TCK makes goes through an `httpx.Client` (the module-level `httpx.get/post` build one too), so
giving each new client a default `Authorization` header authenticates all of them without changing
a line of the TCK. The key is read from A2A_TCK_BEARER and never printed. The TCK's webhook
receiver binds 0.0.0.0 by default; it is bound to 127.0.0.1 here, where the host under test runs.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import httpx


def _with_bearer(init: Any, token: str) -> Any:
    @functools.wraps(init)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> None:
        headers = httpx.Headers(kwargs.pop("headers", None))
        headers.setdefault("Authorization", f"Bearer {token}")
        init(self, *args, headers=headers, **kwargs)

    return wrapped


def pytest_configure(config: Any) -> None:
    token = os.environ.get("A2A_TCK_BEARER", "")
    if not token:
        raise RuntimeError("A2A_TCK_BEARER is not set: the host refuses unauthenticated A2A requests.")
    httpx.Client.__init__ = _with_bearer(httpx.Client.__init__, token)  # type: ignore[method-assign]
    httpx.AsyncClient.__init__ = _with_bearer(httpx.AsyncClient.__init__, token)  # type: ignore[method-assign]
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
