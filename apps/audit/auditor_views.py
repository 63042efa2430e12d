"""The auditors' page of negotiation records: filters, a per-day chart, CSV export, and the links
to the archive's exports of the records (issue 36). Read-only.

The list pages through every record with a cursor (`?after=`, the filters kept in the same query);
the charts cover every matching record, read from the daily rollup.

A host-private page (`/host/openwop-host/...`, versioning.md §5) behind the admin's session login,
for members of the `auditors` group (and superusers).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.decorators import user_passes_test
from django.http import Http404, HttpRequest, HttpResponseBase, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from apps.audit.archive import ArchiveUnavailable, archive_exports_latest, archive_read
from apps.audit.models import ArchiveExport
from apps.audit.negotiations import (
    OUTCOME_CLASSES,
    NegotiationFilters,
    negotiation_daily_totals,
    negotiation_page,
    negotiation_records,
)
from apps.core.downloads import attachment_disposition, csv_download

PAGE_SIZE = 100
CSV_COLUMNS = ("at", "tenant", "protocol", "outcome", "requested", "version", "reason", "floor", "peerDigest", "where")
# The NegotiationRecord attribute each column after `at` shows.
_ATTRS = ("tenant", "protocol", "outcome_class", "requested", "version", "reason", "floor", "peer_digest", "location")


def is_auditor(user: Any) -> bool:
    return bool(user.is_active and (user.is_superuser or user.groups.filter(name="auditors").exists()))


class SinceUntilForm(forms.Form):
    """A form's `since` and `until` dates, checked together."""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:  # no record could match: say so, never an empty page
            raise forms.ValidationError("'Since' must not be after 'until'.")
        return data


class NegotiationFilterForm(SinceUntilForm):
    protocol = forms.ChoiceField(required=False, choices=[("", "any"), ("a2a", "A2A"), ("mcp", "MCP")])
    outcome = forms.ChoiceField(required=False, choices=[("", "any"), *((c, c) for c in OUTCOME_CLASSES)])
    tenant = forms.CharField(required=False, max_length=128)
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    requested = forms.CharField(required=False, max_length=32, label="Requested version")
    reversed_range: tuple[dt.date, dt.date] | None = None

    def clean(self) -> dict[str, Any]:
        """Not SinceUntilForm's refusal: a reversed range is ignored and said so (`ignored`), and
        the other filters still apply (issue 53), never all dropped at once."""
        data = forms.Form.clean(self) or {}
        self.reversed_range = None
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.reversed_range = (since, until)
            data["since"] = data["until"] = None
        return data

    def filters(self) -> NegotiationFilters:
        """The filters of the fields that are valid (their names are NegotiationFilters'); empty
        ones, and an invalid one (named in `ignored`), are None. Unbound: no filter."""
        if not self.is_bound:
            return NegotiationFilters()
        self.is_valid()  # cleans: cleaned_data holds every valid field, whatever the others
        return NegotiationFilters(**{name: self.cleaned_data.get(name) or None for name in self.fields})

    def ignored(self) -> list[str]:
        """What of the request the filters leave out, and why."""
        if not self.is_bound or (self.is_valid() and self.reversed_range is None):
            return []
        notes = []
        if self.reversed_range is not None:
            since, until = self.reversed_range
            notes.append(f"the date range ('since' {since} must not be after 'until' {until})")
        for name, errors in self.errors.items():
            if name in self.fields:
                notes.append(f"{self[name].label} ({' '.join(map(str, errors))})")
        return notes


def _csv_rows(filters: NegotiationFilters) -> Iterator[tuple[str | None, ...]]:
    for r in negotiation_records(filters=filters):
        yield (r.at.isoformat(), *(getattr(r, name) for name in _ATTRS))


@require_GET
@user_passes_test(is_auditor, login_url="/admin/login/")
def negotiation_audit(request: HttpRequest) -> HttpResponseBase:
    form = NegotiationFilterForm(request.GET or None)
    filters = form.filters()
    if request.GET.get("format") == "csv":
        return csv_download(stem="negotiations", header=CSV_COLUMNS, rows=_csv_rows(filters))
    after = request.GET.get("after") or None
    records, next_cursor = negotiation_page(filters=filters, after=after, size=PAGE_SIZE)
    # One chart per protocol: accepted / downgraded / refused per day, on one shared scale.
    charts = negotiation_daily_totals(filters=filters)
    peak = max((sum(c.values()) for _, days in charts for _, c in days), default=0)
    query = request.GET.copy()
    query.pop("after", None)
    first_query = query.urlencode()
    next_query = None
    if next_cursor:
        query["after"] = next_cursor
        next_query = query.urlencode()
        query.pop("after")
    query["format"] = "csv"
    return render(
        request,
        "audit/negotiations.html",
        {
            **admin.site.each_context(request),  # the admin's header, user links and breadcrumbs
            "form": form,
            "ignored": form.ignored(),
            "can_view_runs": request.user.has_perm("runs.view_run"),
            "records": records,
            "charts": charts,
            "peak": peak,
            "page_size": PAGE_SIZE,
            "paged": after is not None,
            "first_query": first_query,
            "next_query": next_query,
            "csv_query": query.urlencode(),
            "classes": OUTCOME_CLASSES,
            "exports": archive_exports_latest(tenant_slug=filters.tenant),
        },
    )


@require_GET
@user_passes_test(is_auditor, login_url="/admin/login/")
def archive_export_download(request: HttpRequest, pk: int, part: str) -> HttpResponseBase:
    """One export's records file or manifest, read back from the archive (a browser cannot open
    s3:// or the host's file:// URLs), bytes unchanged so the manifest's SHA-256 still holds."""
    export = get_object_or_404(ArchiveExport.unscoped_all_tenants, pk=pk)  # auditors see every tenant
    url = export.manifest_url if part == "manifest" else export.file_url
    content_type = "application/json" if part == "manifest" else "application/gzip"
    try:
        chunks = archive_read(url)
    except ArchiveUnavailable as exc:  # pruned from the archive since: the row stays, the object is gone
        raise Http404("The export is no longer in the archive.") from exc
    response = StreamingHttpResponse(chunks, content_type=content_type)
    response["Content-Disposition"] = attachment_disposition(url.rsplit("/", 1)[-1])
    return response
