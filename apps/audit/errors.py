"""Errors of the audit app: one wire error, and two programming errors callers must never see."""

from __future__ import annotations

from typing import Any

from apps.core.errors import OpenWopError


class HostEventResyncRequired(OpenWopError):
    """`Last-Event-ID` names no durable event of the caller's own stream.

    Unknown, foreign (another Subject's or tenant's) and ephemeral ids get the same answer, so the
    cursor reveals nothing about other streams (events.md §Host events, tenant gate).
    """

    code = "host_event_resync_required"
    default_message = "Last-Event-ID names no event this stream can resume after; resubscribe without it."

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        # 409 in the v2 error registry; apps.core.errors.REGISTERED_STATUS does not list it yet.
        kwargs.setdefault("status", 409)
        super().__init__(message, **kwargs)


class UnregisteredHostEventType(LookupError):
    """A caller tried to append a type no app registered (a bug, never a client error)."""


class HostEventDeliveryMismatch(ValueError):
    """A caller asked for a class other than the type's registered one (a bug, never a client error)."""
