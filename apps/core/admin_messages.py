"""Admin messages that name the object (issue 53 item 5): "Unpublished demo-assistant (demo)", not
"1 agent(s)"; "Changed the a2a facet: Preferred version", not "changed successfully". And the
confirmation page an action that changes what the host serves asks for first, as Django's delete
action does.

Messages are plain text: the admin's template escapes them, whatever an object's name holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.contrib import messages
from django.contrib.admin import helpers
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.functional import Promise

StrOrPromise = str | Promise  # what Django takes as a message

NAMED_AT_MOST = 10  # a message names this many objects, then says how many more


def named(labels: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'; past NAMED_AT_MOST, '... and n more'."""
    shown, more = list(labels[:NAMED_AT_MOST]), len(labels) - NAMED_AT_MOST
    if more > 0:
        return f"{', '.join(shown)} and {more} more"
    if len(shown) <= 1:
        return "".join(shown) or "nothing"
    return f"{', '.join(shown[:-1])} and {shown[-1]}"


_EMPTY: tuple[Any, ...] = (None, "", [], {})


def _really_changed(form: Any) -> list[str]:
    """The fields the save changes: `changed_data` without those whose value is the one they had
    (Django counts an empty JSON list posted back as a change, and an empty value as another)."""
    changed = []
    for name in form.changed_data:
        if name not in form.fields:
            continue
        value, initial = form.cleaned_data.get(name), form[name].initial
        if value == initial or (value in _EMPTY and initial in _EMPTY):
            continue
        changed.append(name)
    return changed


# The request attributes carrying a save's message from save_form / response_* to message_user.
_CHANGED, _SAVED = "_openwop_admin_changed", "_openwop_admin_saved"


class NamedMessagesAdminMixin:
    """Mix into a ModelAdmin, before the admin base class: its add and change messages name the
    object (`object_label`) and the fields the save changed."""

    def object_label(self, obj: Any) -> str:
        return str(obj)

    def save_form(self, request: HttpRequest, form: Any, change: bool) -> Any:
        labels = [str(form.fields[name].label or name) for name in _really_changed(form)]
        setattr(request, _CHANGED, labels)
        return super().save_form(request, form, change)  # type: ignore[misc]

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: str | None = None) -> HttpResponse:
        setattr(request, _SAVED, f"Added {self.object_label(obj)}.")
        return super().response_add(request, obj, post_url_continue)  # type: ignore[misc]

    def response_change(self, request: HttpRequest, obj: Any) -> HttpResponse:
        fields = getattr(request, _CHANGED, [])
        label = self.object_label(obj)
        text = f"Changed {label}: {', '.join(fields)}." if fields else f"Saved {label}: no field was changed."
        setattr(request, _SAVED, text)
        return super().response_change(request, obj)  # type: ignore[misc]

    def message_user(
        self, request: HttpRequest, message: StrOrPromise, level: int | str = messages.INFO, extra_tags: str = "",
        fail_silently: bool = False,
    ) -> None:  # fmt: skip
        saved = getattr(request, _SAVED, None)
        if saved is not None and level == messages.SUCCESS:  # Django's own "... successfully" message
            delattr(request, _SAVED)
            message = saved
        super().message_user(request, message, level, extra_tags, fail_silently)  # type: ignore[misc]


def action_confirmation(
    modeladmin: Any, request: HttpRequest, objects: Iterable[Any], *, labels: Sequence[str], verb: str, question: str
) -> TemplateResponse | None:
    """None when this POST is the confirmed one; else the page that asks `question`, lists
    `labels` and posts the same action and selection back with `post=yes` (and the CSRF token)."""
    if request.POST.get("post") == "yes":
        return None
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"{verb}: are you sure?",
        "question": question,
        "labels": labels,
        "pks": [obj.pk for obj in objects],
        "action": request.POST.get("action", ""),
        "verb": verb,
        "opts": opts,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "admin/action_confirmation.html", context)
