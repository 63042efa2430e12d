"""Opaque keyset cursors: one signed position (a timestamp and a pk) in one listing.

A cursor is signed with SECRET_KEY under a per-listing salt and names the listing's scope (a
tenant, a webhook), so it cannot be forged, edited, or carried to another listing: any of those is
one 400 with field `cursor`. Readers order by (timestamp desc, pk desc) and resume strictly after.
"""

from __future__ import annotations

from datetime import datetime

from django.core import signing
from django.db.models import Q
from django.utils.dateparse import parse_datetime

from apps.core.errors import ValidationFailed


def cursor_mint(*, salt: str, scope: str, at: datetime, pk: int) -> str:
    return signing.dumps({"t": scope, "c": at.isoformat(), "i": pk}, salt=salt, compress=True)


def cursor_after(cursor: str, *, salt: str, scope: str, field: str) -> Q:
    """The filter for rows after the cursor's position, newest first; 400 for a foreign cursor."""
    try:
        data = signing.loads(cursor, salt=salt)
        at = parse_datetime(data["c"])
        if data["t"] != scope or at is None or not isinstance(data["i"], int):
            raise ValueError("cursor of another listing")
    except (signing.BadSignature, KeyError, TypeError, ValueError) as exc:
        raise ValidationFailed("The cursor was not minted by this host.", details={"field": "cursor"}) from exc
    return Q(**{f"{field}__lt": at}) | Q(**{field: at, "id__lt": data["i"]})
