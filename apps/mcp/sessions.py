"""Handshake-era sessions (`Mcp-Session-Id`, MCP 2025-06-18 / 2025-11-25 streamable HTTP).

`initialize` mints a session; every later request names it. A session is bound to the tenant and
principal that opened it: looked up by anyone else it does not exist, exactly like an unknown or
ended id (interop.md §Isolation). Sessions idle for SESSION_IDLE_TTL lapse.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from typing import Any

from django.utils import timezone

from apps.mcp.models import McpSession
from apps.tenants.models import Tenant
from apps.tenants.subject import Subject

SESSION_IDLE_TTL = dt.timedelta(hours=24)
_MAX_ID_LENGTH = 128


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def session_open(*, subject: Subject, protocol_version: str, client_capabilities: dict[str, Any]) -> str:
    """Mint a session and return its id (visible ASCII, as the transport requires)."""
    session_id = secrets.token_urlsafe(32)
    tenant = Tenant.objects.get(slug=subject.tenant)
    McpSession.objects.for_tenant(tenant).filter(expires_at__lt=timezone.now()).delete()  # lapsed ones
    McpSession.objects.create(
        tenant=tenant,
        id_digest=_digest(session_id),
        subject_id=subject.subject_id,
        protocol_version=protocol_version,
        client_capabilities=client_capabilities,
        expires_at=timezone.now() + SESSION_IDLE_TTL,
    )
    return session_id


def session_get(*, subject: Subject, session_id: str) -> McpSession | None:
    """The caller's live session with this id, its idle clock restarted; None for anything else."""
    if not session_id or len(session_id) > _MAX_ID_LENGTH:
        return None
    now = timezone.now()
    tenant = Tenant.objects.filter(slug=subject.tenant).first()
    if tenant is None:
        return None
    live = McpSession.objects.for_tenant(tenant).filter(
        id_digest=_digest(session_id), subject_id=subject.subject_id, expires_at__gt=now
    )
    session = live.first()
    if session is not None:
        live.update(expires_at=now + SESSION_IDLE_TTL)
    return session


def session_end(*, subject: Subject, session_id: str) -> bool:
    """End the caller's session (HTTP DELETE); False when there is no such live session."""
    session = session_get(subject=subject, session_id=session_id)
    if session is None:
        return False
    deleted, _ = McpSession.objects.for_tenant(session.tenant_id).filter(pk=session.pk).delete()
    return deleted == 1
