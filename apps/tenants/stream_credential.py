"""Does an open stream's bearer credential still hold? (apps.core.stream_lease)

A stream is authorized once, when it opens; this is the re-check it runs every
`OPENWOP_STREAM_RECHECK_SECONDS`. It resolves the credential exactly as a new request would,
through the same per-process cache and invalidation (`asubject_from_authorization_cached`): an
unchanged key is a cache hit and costs no query, a revoked key is dropped from every process's
cache by its table's trigger and refused, an access token is refused once its `exp` (or its
introspection answer) has passed.
"""

from __future__ import annotations

import logging

from apps.core.db_threads import release_db_connection_if_used
from apps.core.errors import Unauthenticated
from apps.core.stream_lease import Allowed
from apps.tenants.selectors import asubject_from_authorization_cached

logger = logging.getLogger(__name__)


def credential_check(authorization: str | None, *, door: str) -> Allowed:
    """`allowed()` for a stream opened with `authorization` at `door` ("rest", "a2a")."""

    async def allowed() -> bool:
        try:
            await asubject_from_authorization_cached(authorization, door=door)
        except Unauthenticated:  # revoked, unknown, expired: every 401 of identity.md §2
            return False
        except Exception as exc:  # the database unreachable: not a verdict on the credential
            logger.warning("stream credential re-check failed (%s); trying again later", type(exc).__name__)
        finally:
            await release_db_connection_if_used()  # a waiting stream holds no connection
        return True

    return allowed


def door_of(path: str) -> str:
    """The audience a path's credential is checked for (as its view authenticates it)."""
    if path == "/mcp":
        return "mcp"
    return "a2a" if path == "/a2a" or path.startswith("/a2a/") else "rest"
