"""Operators tune the facets here; every save goes through facet_update (validated, audited)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from apps.core.admin_read_only import ReadOnlyAdminMixin
from apps.core.errors import ValidationFailed
from apps.facets.models import Facet, FacetChange, FacetRefresh
from apps.facets.services import EDITABLE_FIELDS, facet_refresh, facet_update


class AppendOnlyAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Audit rows are read in the admin, never written or removed there."""


@admin.register(Facet)
class FacetAdmin(admin.ModelAdmin):
    list_display = ("protocol", "versions", "preferred_version", "minimum_version", "refreshed_at", "freshness")
    readonly_fields = ("protocol", "refreshed_at", "freshness", "updated_at")
    actions = ("reevaluate",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # one row per protocol, created by the host

    def has_delete_permission(self, request: HttpRequest, obj: Facet | None = None) -> bool:
        return False

    def get_fields(self, request: HttpRequest, obj: Facet | None = None) -> list[str]:
        editable = list(EDITABLE_FIELDS[obj.protocol]) if obj else []  # type: ignore[index]
        return ["protocol", *editable, "refreshed_at", "freshness", "updated_at"]

    @admin.display(description="Freshness")
    def freshness(self, obj: Facet) -> str:
        if obj.is_stale(timezone.now().date()):
            return format_html('<strong style="color:#ba2121">STALE</strong> (window {} days)', obj.refresh_window_days)
        return format_html('<span style="color:#2a7d2a">fresh</span> (window {} days)', obj.refresh_window_days)

    def save_model(self, request: HttpRequest, obj: Facet, form: Any, change: bool) -> None:
        editable = EDITABLE_FIELDS[obj.protocol]  # type: ignore[index]
        changes = {field: form.cleaned_data[field] for field in form.changed_data if field in editable}
        try:
            actor = f"admin:{request.user.get_username()}"
            facet_update(protocol=obj.protocol, changes=changes, actor=actor)  # type: ignore[arg-type]
        except ValidationFailed as exc:  # clean() already ran the same rules; this is a race
            messages.error(request, f"{exc.message} {exc.details}")

    @admin.action(description="Re-evaluate against the upstream registry now")
    def reevaluate(self, request: HttpRequest, queryset: QuerySet[Facet]) -> None:
        for facet in queryset:
            result = facet_refresh(protocol=facet.protocol)  # type: ignore[arg-type]
            if result.ok:
                self.message_user(request, f"{facet.protocol}: all offered versions known.", messages.SUCCESS)
            else:
                self.message_user(
                    request, f"{facet.protocol}: unknown to the registry: {', '.join(result.unknown)}", messages.ERROR
                )


@admin.register(FacetChange)
class FacetChangeAdmin(AppendOnlyAdmin):
    list_display = ("at", "protocol", "actor")
    list_filter = ("protocol",)
    readonly_fields = ("protocol", "actor", "before", "after", "at")


@admin.register(FacetRefresh)
class FacetRefreshAdmin(AppendOnlyAdmin):
    list_display = ("at", "protocol", "evaluated_on", "ok", "unknown")
    list_filter = ("protocol", "ok")
    readonly_fields = (
        "protocol", "at", "evaluated_on", "ok", "offered", "unknown", "registry_source", "registry_updated",
    )
