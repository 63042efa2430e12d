"""The one read-only admin behaviour for append-only and derived rows (audit trails, logs,
deliveries): visible to whoever may view them, never added, changed or deleted in the admin."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest


class ReadOnlyAdminMixin:
    """Mix into a ModelAdmin or an inline, before the admin base class."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # with the view permission the detail page still renders, read-only

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
