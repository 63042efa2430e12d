"""Operators tune the facets here; every save goes through facet_update (validated, audited).

The change page shows, read-only, the discovery document and the public agent card exactly as they
would be served after saving: the edit is applied by `facet_update` inside a transaction that is
rolled back, and the documents are rendered by the builders that serve them (apps/core/discovery,
apps/a2a/card; the page is registered by apps/a2a/admin.py, on the floor that serves the card). The
same endpoint returns the services' validation messages as the operator types.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any, ClassVar, Literal, cast

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from apps.core.actors import admin_actor
from apps.core.admin_choices import TenantLabelledChoicesAdminMixin
from apps.core.admin_diff import ChangeDiffAdminMixin
from apps.core.admin_messages import NamedMessagesAdminMixin
from apps.core.admin_read_only import ReadOnlyAdminMixin
from apps.core.admin_service_writes import ServiceWritesAdminMixin
from apps.core.discovery import discovery_document
from apps.core.errors import ValidationFailed
from apps.core.protocol_versions import Protocol
from apps.facets.models import Facet, FacetChange, FacetRefresh, VersionPolicy, VersionPolicyChange
from apps.facets.policy import version_policy_errors
from apps.facets.services import (
    EDITABLE_FIELDS,
    facet_ensure,
    facet_fields,
    facet_floor_schedule,
    facet_floor_schedule_errors,
    facet_refresh,
    facet_update,
    version_policy_clear,
    version_policy_set,
)
from apps.facets.validation import facet_errors

Freshness = Literal["fresh", "due", "stale"]
DUE_WITHIN_DAYS = 7  # a week's notice before an advertisement breaks the refresh SLA


def facet_freshness(facet: Facet, today: dt.date) -> tuple[Freshness, int | None]:
    """fresh / due (the window ends within a week) / stale (interop.md §The refresh SLA), with the
    days left in the window (None when never evaluated)."""
    if facet.refreshed_at is None:
        return "stale", None
    left = facet.refresh_window_days - (today - facet.refreshed_at).days
    if facet.is_stale(today):
        return "stale", left
    return ("due" if left <= min(DUE_WITHIN_DAYS, facet.refresh_window_days // 2) else "fresh"), left


def served_documents_after(
    protocol: str, changes: dict[str, Any], actor: str, *, agent_card: Callable[[], dict[str, Any] | None]
) -> dict[str, Any]:
    """Discovery and the public agent card (`agent_card`: as served, wire JSON) as they would be
    served once `changes` are saved.

    The edit really runs (facet_update: validation, audit row) and is then rolled back, so the
    preview can never drift from what saving does; nothing of it is committed.
    """
    with transaction.atomic():
        if changes:
            facet_update(protocol=protocol, changes=changes, actor=actor)  # type: ignore[arg-type]
        documents = {"discovery": discovery_document(), "agentCard": agent_card()}
        transaction.set_rollback(True)
    return documents


class AppendOnlyAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Audit rows are read in the admin, never written or removed there."""


class PolicyAdmin(ServiceWritesAdminMixin, admin.ModelAdmin):
    """A policy admin whose `delete_model` calls an audited service: a bulk delete goes through it
    row by row, so each deletion has its audit row."""

    list_select_related: ClassVar[tuple[str, ...]] = ()

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for policy in queryset.select_related(*self.list_select_related):
            self.delete_model(request, policy)


def _edits(form: Any, protocol: str) -> dict[str, Any]:
    """The facet fields the operator changed on the form."""
    editable = EDITABLE_FIELDS[protocol]  # type: ignore[index]
    return {field: form.cleaned_data[field] for field in form.changed_data if field in editable}


class OfferedVersionField(forms.ChoiceField):
    """A select of the facet's offered versions whose value the services validate, not the select:
    their message names the rule ("must be one of the offered versions"), and a version offered
    in the same save is theirs to accept."""

    def valid_value(self, value: str) -> bool:
        return True


class OfferedVersionsInput(forms.TextInput):
    """A text input that offers the facet's versions as it stands (a datalist): the preferred
    version and the floor are one of them, or of the versions the same save offers."""

    def __init__(self, versions: list[str], attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.versions = [str(v) for v in versions]

    def render(self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None) -> SafeString:
        list_id = f"{(attrs or {}).get('id') or name}_offered"
        field = super().render(name, value, {**(attrs or {}), "list": list_id}, renderer)
        options = format_html_join("", '<option value="{}"></option>', ((v,) for v in self.versions))
        return format_html('{}<datalist id="{}">{}</datalist>', field, list_id, options)


# The form's names of the schedule (the model keeps its own fields non-editable: only
# facet_floor_schedule writes them) and the schedule field each stands for.
SCHEDULE_FORM_FIELDS = {"schedule_minimum": "scheduled_minimum_version", "schedule_at": "scheduled_at"}


class FacetForm(forms.ModelForm):
    """The facet's editable fields and its scheduled host floor (issue 53), checked by the check
    `facet_floor_schedule` runs (`facet_floor_schedule_errors`) against the facet as it will be
    after this save's edits."""

    schedule_minimum = OfferedVersionField(
        required=False, label="Scheduled floor",
        help_text="Becomes the floor at the date below (the beat job applies it); (none): no schedule.",
    )  # fmt: skip
    schedule_at = forms.DateTimeField(
        required=False, label="Scheduled floor takes effect at",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"),
        help_text="UTC. Empty with the floor (none) to cancel a schedule.",
    )  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        facet: Facet = self.instance
        offered = [str(v) for v in facet.versions or []]
        if facet.scheduled_minimum_version and facet.scheduled_minimum_version not in offered:
            offered.append(facet.scheduled_minimum_version)  # shown as stored, not silently replaced
        self.fields["schedule_minimum"].choices = [("", "(none)"), *((v, v) for v in offered)]  # type: ignore[attr-defined]
        for name in ("preferred_version", "minimum_version"):  # suggested: a version this save offers is valid too
            if name in self.fields:
                self.fields[name].widget = OfferedVersionsInput(facet.versions or [], self.fields[name].widget.attrs)
        self.initial.setdefault("schedule_minimum", facet.scheduled_minimum_version)
        self.initial.setdefault("schedule_at", facet.scheduled_at)

    def schedule(self) -> tuple[str, dt.datetime | None]:
        return self.cleaned_data.get("schedule_minimum") or "", self.cleaned_data.get("schedule_at")

    def schedule_changed(self) -> bool:
        return self.schedule() != (self.instance.scheduled_minimum_version, self.instance.scheduled_at)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.instance.pk is None or not self.schedule_changed():
            return data  # a stored schedule is the beat job's to apply, not this save's to refuse
        protocol = cast(Protocol, self.instance.protocol)
        after_edits = {**facet_fields(self.instance), **{f: data[f] for f in EDITABLE_FIELDS[protocol] if f in data}}
        minimum, at = self.schedule()
        errors = facet_floor_schedule_errors(protocol=protocol, facet_values=after_edits, minimum=minimum, at=at)
        by_model_field = {model_field: name for name, model_field in SCHEDULE_FORM_FIELDS.items()}
        for field, field_errors in errors.items():
            self.add_error(by_model_field[field], field_errors)
        return data


class FacetAdminBase(NamedMessagesAdminMixin, ServiceWritesAdminMixin, admin.ModelAdmin):
    """The facets' page. Its preview shows the public agent card as served, which apps/a2a builds:
    its admin registers this page with the card (apps/a2a/admin.py `FacetAdmin`)."""

    list_display = (
        "protocol", "offered_versions", "preferred_version", "minimum_version", "scheduled_floor", "refreshed_at",
        "freshness",
    )  # fmt: skip
    readonly_fields = ("protocol", "refreshed_at", "freshness", "updated_at")
    actions = ("reevaluate",)
    form = FacetForm
    change_form_template = "admin/facets/facet/change_form.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # one row per protocol, created by the host

    def has_delete_permission(self, request: HttpRequest, obj: Facet | None = None) -> bool:
        return False

    def served_card(self) -> dict[str, Any] | None:
        """The public agent card as served, wire JSON (none on this floor)."""
        return None

    def instance_check(self, instance: Facet) -> None:
        errors = facet_errors(instance.protocol, facet_fields(instance))  # type: ignore[arg-type]
        if errors:
            raise ValidationError(errors)

    def get_fields(self, request: HttpRequest, obj: Facet | None = None) -> tuple[str, ...]:
        editable = list(EDITABLE_FIELDS[obj.protocol]) if obj else []  # type: ignore[index]
        # The scheduled floor: the same service as `facet_set --at` (facet_floor_schedule, audited).
        return ("protocol", *editable, *SCHEDULE_FORM_FIELDS, "refreshed_at", "freshness", "updated_at")

    @admin.display(description="Versions")
    def offered_versions(self, obj: Facet) -> str:
        return ", ".join(obj.versions)  # the list as people write it, not as JSON

    @admin.display(description="Scheduled floor")
    def scheduled_floor(self, obj: Facet) -> str:
        if obj.scheduled_at is None:
            return "none"
        return f"{obj.scheduled_minimum_version} from {obj.scheduled_at:%Y-%m-%d %H:%M:%S} UTC"

    @admin.display(description="Refresh SLA")
    def freshness(self, obj: Facet) -> str:
        state, left = facet_freshness(obj, timezone.now().date())
        detail = "never evaluated" if left is None else f"{left} of {obj.refresh_window_days} days left"
        return format_html('<span class="sla sla-{}">{}</span> ({})', state, state.upper(), detail)

    def get_urls(self) -> list[URLPattern]:
        preview = self.admin_site.admin_view(require_POST(self.preview_view))
        return [path("<path:object_id>/preview/", preview, name="facets_facet_preview"), *super().get_urls()]

    def preview_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST the change form: the services' field errors, or the documents after saving."""
        facet = self.get_object(request, object_id)
        if facet is None:
            raise Http404("No such facet.")
        if not self.has_change_permission(request, facet):
            raise PermissionDenied
        form = self.get_form(request, facet, change=True)(request.POST, instance=facet)
        if not form.is_valid():
            errors = form.errors.get_json_data()
            return JsonResponse({"errors": {field: [e["message"] for e in errs] for field, errs in errors.items()}})
        changes = _edits(form, facet.protocol)
        try:
            documents = served_documents_after(
                facet.protocol, changes, f"admin-preview:{request.user.get_username()}", agent_card=self.served_card
            )
        except ValidationFailed as exc:
            return JsonResponse({"errors": (exc.details or {}).get("fields", {"__all__": [exc.message]})})
        return JsonResponse({"errors": {}, **documents})

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        facet = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if facet is not None:
            documents = served_documents_after(facet.protocol, {}, "admin-preview", agent_card=self.served_card)
            context["preview_discovery"] = json.dumps(documents["discovery"], indent=2, sort_keys=True)
            context["preview_card"] = json.dumps(documents["agentCard"], indent=2, sort_keys=True)
        return super().change_view(request, object_id, form_url, context)

    def save_model(self, request: HttpRequest, obj: Facet, form: Any, change: bool) -> None:
        actor = admin_actor(request.user.get_username())
        protocol = obj.protocol
        try:
            # One transaction, as `facet_set`: a refused schedule leaves the edits unmade too.
            with transaction.atomic():
                facet_update(protocol=protocol, changes=_edits(form, protocol), actor=actor)  # type: ignore[arg-type]
                if form.schedule_changed():
                    minimum, at = form.schedule()
                    facet_floor_schedule(protocol=protocol, minimum=minimum, at=at, actor=actor)  # type: ignore[arg-type]
        except ValidationFailed as exc:  # the form ran the same rules; this is a race
            messages.error(request, exc.message)

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
class FacetChangeAdmin(ChangeDiffAdminMixin, AppendOnlyAdmin):
    list_display = ("at", "protocol", "actor", "changed_fields")
    list_filter = ("protocol",)
    search_fields = ("actor",)
    date_hierarchy = "at"
    fields = readonly_fields = ("protocol", "actor", "at", "difference")


@admin.register(FacetRefresh)
class FacetRefreshAdmin(AppendOnlyAdmin):
    list_display = ("at", "protocol", "evaluated_on", "ok", "unknown_versions")
    list_filter = ("protocol", "ok")
    date_hierarchy = "at"
    readonly_fields = (
        "protocol",
        "at",
        "evaluated_on",
        "ok",
        "offered",
        "unknown",
        "registry_source",
        "registry_updated",
    )

    @admin.display(description="Unknown to the registry")
    def unknown_versions(self, obj: FacetRefresh) -> str:
        return ", ".join(obj.unknown) or "none"


def _policy_values(policy: VersionPolicy) -> dict[str, Any]:
    """The policy the form built, as the rules and the services take it."""
    return {
        "tenant": policy.tenant,
        "agent": policy.agent if policy.agent_id is not None else None,
        "protocol": policy.protocol,
        "minimum": policy.minimum_version,
        "scheduled_minimum": policy.scheduled_minimum_version,
        "scheduled_at": policy.scheduled_at,
    }


@admin.register(VersionPolicy)
class VersionPolicyAdmin(TenantLabelledChoicesAdminMixin, NamedMessagesAdminMixin, PolicyAdmin):
    """A tenant's or an agent's floor (issue 24). The form runs the policy rules (instance_check:
    never looser than the host floor, an agent's never looser than its tenant's) and shows their
    messages on the fields; every save and delete goes through the services, audited in the same
    transaction as the change (VersionPolicyChange)."""

    list_display = ("tenant", "agent", "protocol", "minimum_version", "scheduled_minimum_version", "scheduled_at")
    list_filter = ("protocol",)
    search_fields = ("tenant__slug", "agent__agent_id")
    list_select_related = ("tenant", "agent")
    fields = ("tenant", "agent", "protocol", "minimum_version", "scheduled_minimum_version", "scheduled_at")

    def get_readonly_fields(self, request: HttpRequest, obj: VersionPolicy | None = None) -> tuple[str, ...]:
        return ("tenant", "agent", "protocol") if obj is not None else ()  # a policy's key never moves

    def get_form(
        self, request: HttpRequest, obj: VersionPolicy | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        """The floors are selects of the host's offered versions (of the policy's protocol, or of
        each protocol on the add form); the policy rules, not the select, validate the value."""
        form = super().get_form(request, obj, change=change, **kwargs)
        protocols = [obj.protocol] if obj is not None else ["a2a", "mcp"]
        offered = {p: [str(v) for v in facet_ensure(protocol=p).versions] for p in protocols}  # type: ignore[arg-type]
        for name in ("minimum_version", "scheduled_minimum_version"):
            if name not in form.base_fields:
                continue
            stored = getattr(obj, name) if obj is not None else ""
            if obj is not None:
                values = offered[obj.protocol] + ([stored] if stored and stored not in offered[obj.protocol] else [])
                choices: list[Any] = [("", "(none)"), *((v, v) for v in values)]
            else:
                choices = [("", "(none)"), *((p.upper(), [(v, v) for v in vs]) for p, vs in offered.items())]
            was = form.base_fields[name]
            form.base_fields[name] = OfferedVersionField(
                choices=choices, required=False, label=was.label, help_text=was.help_text
            )
        return form

    def instance_check(self, instance: VersionPolicy) -> None:
        if instance.tenant_id is None or instance.protocol not in ("a2a", "mcp"):
            return  # the field errors say so
        host = facet_ensure(protocol=instance.protocol)  # type: ignore[arg-type]
        errors = version_policy_errors(**_policy_values(instance), host=host)
        if errors:
            raise ValidationError(errors)

    def save_model(self, request: HttpRequest, obj: VersionPolicy, form: Any, change: bool) -> None:
        try:
            policy = version_policy_set(**_policy_values(obj), actor=admin_actor(request.user.get_username()))
        except ValidationFailed as exc:  # instance_check ran the same rules; this is a race
            messages.error(request, exc.message)
            return
        obj.pk, obj.updated_at = policy.pk, policy.updated_at

    def delete_model(self, request: HttpRequest, obj: VersionPolicy) -> None:
        version_policy_clear(
            tenant=obj.tenant,
            agent=obj.agent if obj.agent_id is not None else None,
            protocol=obj.protocol,  # type: ignore[arg-type]
            actor=admin_actor(request.user.get_username()),
        )


@admin.register(VersionPolicyChange)
class VersionPolicyChangeAdmin(ChangeDiffAdminMixin, AppendOnlyAdmin):
    list_display = ("at", "tenant_slug", "agent_id", "protocol", "actor", "changed_fields")
    list_filter = ("protocol",)
    search_fields = ("tenant_slug", "agent_id", "actor")
    date_hierarchy = "at"
    fields = readonly_fields = ("tenant_slug", "agent_id", "protocol", "actor", "at", "difference")
