"""What the management commands read from their options, refused alike (exit status 2)."""

from __future__ import annotations

import datetime as dt

from django.core.management.base import CommandError

REFUSED_STATUS = 2  # a refusal: the command changed nothing


def instant_option(option: str, value: str) -> dt.datetime:
    """An ISO 8601 datetime (or date) given as `option`; without an offset it is UTC."""
    try:
        instant = dt.datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(
            f"{option} {value!r} is not an ISO 8601 datetime (e.g. 2027-03-01T00:00:00Z).", returncode=REFUSED_STATUS
        ) from None
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=dt.UTC)
