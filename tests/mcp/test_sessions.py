"""Handshake-era session rows: bound to tenant and principal, lapse when idle, swept, deleted on end."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from apps.mcp.models import McpSession
from apps.mcp.sessions import session_end, session_get, session_open
from apps.tenants.selectors import subject_from_api_key

pytestmark = pytest.mark.django_db


def test_bound_lapsing_swept_and_ended(make_key) -> None:  # type: ignore[no-untyped-def]
    acme, acme_other, globex = (subject_from_api_key(make_key(slug)) for slug in ("acme", "acme", "globex"))
    session_id = session_open(subject=acme, protocol_version="2025-11-25", client_capabilities={})
    assert session_id not in str(list(McpSession.unscoped_all_tenants.values()))  # only the digest is kept
    assert session_get(subject=acme, session_id=session_id) is not None
    assert session_get(subject=globex, session_id=session_id) is None  # another tenant
    assert session_get(subject=acme_other, session_id=session_id) is None  # another principal
    assert not session_end(subject=globex, session_id=session_id)

    McpSession.unscoped_all_tenants.update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert session_get(subject=acme, session_id=session_id) is None  # lapsed
    fresh = session_open(subject=acme, protocol_version="2025-06-18", client_capabilities={})
    assert McpSession.unscoped_all_tenants.count() == 1  # the lapsed row was swept
    assert session_end(subject=acme, session_id=fresh) and McpSession.unscoped_all_tenants.count() == 0
    assert not session_end(subject=acme, session_id=fresh)
