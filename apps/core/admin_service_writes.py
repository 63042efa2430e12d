"""The one admin behaviour for ModelAdmins whose saves and deletes go through write services.

Django wraps every POST of a change, add or delete page in its own `transaction.atomic()`. Our
top-level write services open `transaction.atomic(durable=True)` (STYLE.md habit 3), which refuses
to nest: inside the admin's block every save answered 500 (issue 32 item 9). These admins skip the
admin's wrapper, so the service's durable transaction is the top-level one and its audit row
commits with the change; the admin's own LogEntry follows in its own short transaction.
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.options import csrf_protect_m
from django.http import HttpRequest, HttpResponse


class ServiceWritesAdminMixin:
    """Mix into a ModelAdmin, before the admin base class, when `save_model`, `delete_model` or
    `delete_queryset` call a write service."""

    @csrf_protect_m
    def changeform_view(
        self, request: HttpRequest, object_id: str | None = None, form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:  # fmt: skip
        return self._changeform_view(request, object_id, form_url, extra_context)  # type: ignore[attr-defined]

    @csrf_protect_m
    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self._delete_view(request, object_id, extra_context)  # type: ignore[attr-defined]
