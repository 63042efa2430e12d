"""The deprecation view (issue 24): per protocol and requested version, who still asks for it, with
drill-down to tenants and peers, CSV export, and "what if" a floor moved. Read-only.

A host-private page (`/host/openwop-host/...`, versioning.md §5) behind the admin's session login,
for members of the `operators` or `auditors` group (and superusers): a visitor who is not logged
in is sent to the login page, anyone else logged in is refused (403). Every number comes from the
per-peer rollup (`apps.audit.deprecation`), never from the record tables.

What-if lists who the floor it tried would refuse and, to staff who may change the facets, offers
to schedule that host floor: a POST (CSRF) to `deprecation_schedule` (apps/facets/floor_views.py),
which calls the service
`facet_set --at` and the facet admin call (`facet_floor_schedule`: the same checks, audited).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any, cast
from urllib.parse import urlencode

from django import forms
from django.contrib import admin
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from apps.audit.auditor_views import SinceUntilForm
from apps.audit.deprecation import (
    Window,
    version_peers,
    version_table,
    version_tenants,
    what_if,
    what_if_who,
)
from apps.core.downloads import csv_download
from apps.core.protocol_versions import Protocol, is_valid_version

STAFF_GROUPS = ("operators", "auditors")
DEFAULT_DAYS = 30
WHO_AT_MOST = 20  # what-if lists this many tenants and peers, with the whole count beside
PROTOCOL_CHOICES = [("a2a", "A2A"), ("mcp", "MCP")]
# The CSV exports' columns: attributes of the rows (apps.audit.deprecation), headed in camelCase.
_SEEN = ("first_seen", "last_seen")
VERSION_COLUMNS = ("protocol", "requested", "exchanges", "accepted", "refused", "tenants", "peers", *_SEEN)
TENANT_COLUMNS = ("tenant", "exchanges", "accepted", "peers", *_SEEN)
PEER_COLUMNS = ("peer_digest", "tenants", "exchanges", "accepted", *_SEEN)

View = Callable[..., HttpResponseBase]


def may_see_deprecation(user: Any) -> bool:
    return bool(
        user.is_authenticated
        and user.is_active
        and (user.is_superuser or user.groups.filter(name__in=STAFF_GROUPS).exists())
    )


def operators_and_auditors(view: View) -> View:
    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), "/admin/login/")
        if not may_see_deprecation(request.user):
            raise PermissionDenied("The deprecation view is for operators and auditors.")
        return view(request, *args, **kwargs)

    return guarded


class WindowForm(SinceUntilForm):
    protocol = forms.ChoiceField(required=False, choices=[("", "any"), *PROTOCOL_CHOICES])
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}), label="Until (inclusive)")

    def window(self) -> Window:
        """The chosen window; the last 30 days (UTC) where a bound is missing or the form is invalid."""
        default = Window.last_days(DEFAULT_DAYS)
        if not self.is_valid():
            return default
        since = self.cleaned_data.get("since")
        until = self.cleaned_data.get("until") or default.until
        return Window(since=since or until - dt.timedelta(days=DEFAULT_DAYS - 1), until=until)


class DrillDownForm(WindowForm):
    protocol = forms.ChoiceField(choices=PROTOCOL_CHOICES)
    requested = forms.CharField(required=False, max_length=64, label="Requested version")


class WhatIfForm(forms.Form):
    whatif_protocol = forms.ChoiceField(choices=PROTOCOL_CHOICES, label="Protocol of the floor")
    floor = forms.CharField(max_length=64, label="Floor", help_text="A2A: major.minor, e.g. 1.0. MCP: a date revision.")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        protocol, floor = data.get("whatif_protocol"), data.get("floor")
        if protocol and floor and not is_valid_version(cast(Protocol, protocol), floor):
            example = "1.0" if protocol == "a2a" else "2025-03-26"
            name = dict(PROTOCOL_CHOICES)[protocol]
            self.add_error("floor", f"{floor!r} is not an {name} version (for example {example}).")
        return data


class ScheduleFloorForm(forms.Form):
    """What-if's offer: the floor it tried, as the host's scheduled floor from `at` (UTC)."""

    protocol = forms.ChoiceField(choices=PROTOCOL_CHOICES, widget=forms.HiddenInput)
    floor = forms.CharField(max_length=64, widget=forms.HiddenInput)
    at = forms.DateTimeField(
        label="Takes effect at (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"),
    )


def may_schedule(user: Any) -> bool:
    return bool(user.is_active and user.is_staff and user.has_perm("facets.change_facet"))


def _csv(stem: str, rows: Iterable[Any], columns: tuple[str, ...]) -> HttpResponseBase:
    """A table as CSV, one column per attribute (a date is written as its ISO form by `str`)."""
    header = [re.sub(r"_([a-z])", lambda m: m[1].upper(), column) for column in columns]
    return csv_download(stem=stem, header=header, rows=([getattr(r, c) for c in columns] for r in rows))


@require_GET
@operators_and_auditors
def deprecation_overview(request: HttpRequest) -> HttpResponseBase:
    form = WindowForm(request.GET or None)
    window = form.window()
    protocol = (form.cleaned_data.get("protocol") or None) if form.is_valid() else None
    rows = version_table(window=window, protocol=protocol)
    if request.GET.get("format") == "csv":
        return _csv("deprecation", rows, VERSION_COLUMNS)
    whatif_form = WhatIfForm(request.GET) if "floor" in request.GET else WhatIfForm()
    outcome = who = schedule_form = None
    if whatif_form.is_bound and whatif_form.is_valid():
        outcome = what_if(  # over the window the page shows (kept in the what-if form's hidden fields)
            protocol=whatif_form.cleaned_data["whatif_protocol"], floor=whatif_form.cleaned_data["floor"], window=window
        )
        who = what_if_who(outcome=outcome, limit=WHO_AT_MOST)
        if may_schedule(request.user):
            schedule_form = ScheduleFloorForm(initial={"protocol": outcome.protocol, "floor": outcome.floor})
    window_query = {"since": window.since.isoformat(), "until": window.until.isoformat()}
    query = request.GET.copy()
    query["format"] = "csv"
    drill_url = reverse("deprecation-version")
    return render(
        request,
        "audit/deprecation.html",
        {
            **admin.site.each_context(request),  # the admin's header, user links and breadcrumbs
            "form": form,
            "window": window,
            "rows": [(r, urlencode({**window_query, "protocol": r.protocol, "requested": r.requested})) for r in rows],
            "drill_url": drill_url,
            "csv_query": query.urlencode(),
            "whatif_form": whatif_form,
            "whatif": outcome,
            "who": who,
            "schedule_form": schedule_form,
            "keep": [(name, request.GET[name]) for name in ("protocol", "since", "until") if request.GET.get(name)],
        },
    )


@require_GET
@operators_and_auditors
def deprecation_version(request: HttpRequest) -> HttpResponseBase:
    form = DrillDownForm(request.GET)
    if not form.is_valid():
        context = {**admin.site.each_context(request), "form": form, "invalid": True}
        return render(request, "audit/deprecation_version.html", context, status=400)
    window = form.window()
    protocol, requested = form.cleaned_data["protocol"], form.cleaned_data.get("requested") or ""
    tenants = version_tenants(window=window, protocol=protocol, requested=requested)
    peers = version_peers(window=window, protocol=protocol, requested=requested)
    if request.GET.get("format") == "csv":
        stem = f"deprecation-{protocol}-{requested or 'none'}"  # a caller's string: csv_download makes it safe
        if request.GET.get("table") == "peers":
            return _csv(f"{stem}-peers", peers, PEER_COLUMNS)
        return _csv(f"{stem}-tenants", tenants, TENANT_COLUMNS)
    since, until = window.since.isoformat(), window.until.isoformat()
    base = {"protocol": protocol, "requested": requested, "since": since, "until": until}
    return render(
        request,
        "audit/deprecation_version.html",
        {
            **admin.site.each_context(request),
            "form": form,
            "window": window,
            "protocol": protocol,
            "requested": requested,
            "tenants": tenants,
            "peers": peers,
            "back_query": urlencode({"protocol": protocol, "since": since, "until": until}),
            "tenants_csv": urlencode({**base, "format": "csv", "table": "tenants"}),
            "peers_csv": urlencode({**base, "format": "csv", "table": "peers"}),
        },
    )
