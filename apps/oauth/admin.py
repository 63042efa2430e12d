"""Operators manage trusted issuers here. Every save and delete goes through apps/oauth/services.py
(validated, audited with the admin's username in the same transaction). The form runs the same
rules and fetches the issuer's metadata and keys before it is accepted, so a refusal is shown on
the field. The introspection client secret is write-only: never rendered back, kept when left empty.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.core.actors import admin_actor
from apps.core.admin_diff import ChangeDiffAdminMixin
from apps.core.admin_read_only import ReadOnlyAdminMixin
from apps.core.admin_service_writes import ServiceWritesAdminMixin
from apps.core.errors import ValidationFailed
from apps.oauth.documents import IssuerDocuments, IssuerUnreachable, issuer_documents_fetch
from apps.oauth.models import TrustedIssuer, TrustedIssuerChange
from apps.oauth.services import issuer_add, issuer_refresh, issuer_remove, issuer_update
from apps.oauth.validation import ISSUER_FIELDS, issuer_errors, metadata_errors

FORM_FIELDS = list(ISSUER_FIELDS)


class TrustedIssuerForm(forms.ModelForm):
    new_introspection_client_secret = forms.CharField(
        label="Introspection client secret",
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
        help_text="Write-only: stored sealed, never shown. Leave empty to keep the stored secret.",
    )
    clear_introspection_client_secret = forms.BooleanField(label="Remove the stored secret", required=False)

    class Meta:
        model = TrustedIssuer
        fields = FORM_FIELDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.documents: IssuerDocuments | None = None

    def secret_change(self) -> str | None:
        """None: keep the stored secret; "": remove it; else the new secret."""
        new = self.cleaned_data.get("new_introspection_client_secret") or ""
        if new:
            return str(new)
        return "" if self.cleaned_data.get("clear_introspection_client_secret") else None

    def issuer_values(self) -> dict[str, Any]:
        """The cleaned fields as the services take them (`allowed_tenants` a list of Tenants)."""
        values = {name: self.cleaned_data.get(name) for name in ISSUER_FIELDS}
        return {**values, "allowed_tenants": list(self.cleaned_data.get("allowed_tenants") or [])}

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        values = self.issuer_values()
        secret = self.secret_change()
        stored = bool(self.instance.pk and self.instance.introspection_client_secret)
        has_secret = stored if secret is None else bool(secret)
        errors = issuer_errors(values, has_secret=has_secret)
        for field, field_messages in errors.items():
            self.add_error(field if field in self.fields else None, field_messages)
        if errors:
            return data
        adding = self.instance.pk is None
        if adding or values["issuer"] != self.instance.issuer or values["lane"] != self.instance.lane:
            try:
                self.documents = issuer_documents_fetch(str(values["issuer"]), str(values["lane"]))
            except IssuerUnreachable as exc:
                self.add_error("issuer", f"The issuer's metadata and keys could not be fetched: {exc}")
                return data
        metadata = self.documents.metadata if self.documents is not None else (self.instance.metadata or {})
        for field, field_messages in metadata_errors(values, metadata).items():
            self.add_error(field, field_messages)
        return data


@admin.register(TrustedIssuer)
class TrustedIssuerAdmin(ServiceWritesAdminMixin, admin.ModelAdmin):
    form = TrustedIssuerForm
    list_display = ("issuer", "lane", "tenant", "tenant_claim", "revocation", "revocation_window_seconds",
                    "enabled", "fetched_at")  # fmt: skip
    list_filter = ("lane", "revocation", "enabled")
    search_fields = ("issuer",)
    readonly_fields = ("secret_state", "fetched_at", "metadata", "jwks", "created_at", "updated_at")
    filter_horizontal = ("allowed_tenants",)
    actions = ("refetch",)

    def get_fields(self, request: HttpRequest, obj: TrustedIssuer | None = None) -> list[Any]:
        fields = [*FORM_FIELDS]
        at = fields.index("introspection_client_id") + 1
        fields[at:at] = ["secret_state", "new_introspection_client_secret", "clear_introspection_client_secret"]
        return [*fields, "fetched_at", "metadata", "jwks", "created_at", "updated_at"]

    @admin.display(description="Stored secret")
    def secret_state(self, obj: TrustedIssuer) -> str:
        return "set (hidden)" if obj.introspection_client_secret else "none"

    def _actor(self, request: HttpRequest) -> str:
        return admin_actor(request.user.get_username())

    def save_model(self, request: HttpRequest, obj: TrustedIssuer, form: Any, change: bool) -> None:
        values = form.issuer_values()
        secret = form.secret_change()
        try:
            if change:
                original = TrustedIssuer.objects.get(pk=obj.pk).issuer
                row = issuer_update(
                    issuer=original, changes=values, introspection_client_secret=secret,
                    actor=self._actor(request), documents=form.documents,
                )  # fmt: skip
            else:
                row = issuer_add(
                    fields=values, introspection_client_secret=secret or "",
                    actor=self._actor(request), documents=form.documents,
                )  # fmt: skip
        except ValidationFailed as exc:  # clean() ran the same rules; this is a race
            messages.error(request, exc.message)
            raise
        obj.pk = row.pk
        obj.refresh_from_db()

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass  # the service set the allowed tenants (audited with the row)

    def delete_model(self, request: HttpRequest, obj: TrustedIssuer) -> None:
        issuer_remove(issuer=obj.issuer, actor=self._actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[TrustedIssuer]) -> None:
        for issuer in queryset:
            self.delete_model(request, issuer)

    @admin.action(description="Re-fetch metadata and keys now")
    def refetch(self, request: HttpRequest, queryset: QuerySet[TrustedIssuer]) -> None:
        for issuer in queryset:
            try:
                issuer_refresh(issuer=issuer.issuer)
            except ValidationFailed as exc:
                self.message_user(request, f"{issuer.issuer}: {exc.message}", messages.ERROR)
            else:
                self.message_user(request, f"{issuer.issuer}: metadata and keys fetched.", messages.SUCCESS)


@admin.register(TrustedIssuerChange)
class TrustedIssuerChangeAdmin(ChangeDiffAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("at", "issuer", "actor", "changed_fields")
    search_fields = ("issuer", "actor")
    date_hierarchy = "at"
    fields = readonly_fields = ("issuer", "actor", "at", "difference")
