"""The one admin behaviour for ModelAdmins whose saves and deletes go through write services.

Django wraps every POST of a change, add or delete page in its own `transaction.atomic()`. Our
top-level write services open `transaction.atomic(durable=True)` (STYLE.md habit 3), which refuses
to nest: inside the admin's block every save would answer 500. These admins skip the admin's
wrapper, so the service's durable transaction is the top-level one and its audit row
commits with the change; the admin's own LogEntry follows in its own short transaction.
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.options import csrf_protect_m
from django.core.exceptions import ValidationError
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse


class ServiceWritesAdminMixin:
    """Mix into a ModelAdmin, before the admin base class, when `save_model`, `delete_model` or
    `delete_queryset` call a write service.

    `instance_check` runs the write service's own rules on the instance the form built, after the
    model's field checks, and shows a ValidationError on the form's fields: the rules live in the
    app's services, which a model must not import (an import circle), so no model clean() calls them.
    """

    def instance_check(self, instance: Any) -> None:
        """Raise ValidationError (a dict names the fields) when the services would refuse it."""

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)  # type: ignore[misc]
        return _checked_by(form, self.instance_check)

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


def _checked_by(form: type[ModelForm], check: Any) -> type[ModelForm]:
    class Checked(form):  # type: ignore[valid-type,misc]
        def _post_clean(self) -> None:
            super()._post_clean()  # builds the instance and runs the model's own checks
            try:
                check(self.instance)
            except ValidationError as exc:
                self._update_errors(exc)  # as Django shows a model clean()'s errors

    Checked.__name__ = form.__name__
    return Checked
