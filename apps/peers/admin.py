"""Operators see which peer credentials tenants registered, never the secret (STYLE.md habit 16).
Read-only, except what the peer's agent card must prove: the actions set a credential's
card signature policy through the service (habit 15). Tenants create and delete their own, and pin
a card key, through the REST surface."""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.core.admin_read_only import ReadOnlyAdminMixin
from apps.peers.models import CardSignaturePolicy, PeerBinding, PeerCredential
from apps.peers.services import peer_credential_set_card_signature_policy


@admin.register(PeerCredential)
class PeerCredentialAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "credential_id",
        "tenant",
        "origin",
        "scheme",
        "card_signature_policy",
        "card_key_pinned",
        "label",
        "created_at",
    )
    list_filter = ("tenant", "card_signature_policy")
    search_fields = ("credential_id", "origin", "label")
    fields = (
        "credential_id",
        "tenant",
        "origin",
        "scheme",
        "card_signature_policy",
        "pinned_card_key_shown",
        "label",
        "created_at",
    )
    readonly_fields = fields
    list_select_related = ("tenant",)
    actions = ("require_signed_cards", "verify_cards_if_signed", "ignore_card_signatures")

    @admin.display(boolean=True, description="Card key pinned")
    def card_key_pinned(self, credential: PeerCredential) -> bool:
        return bool(credential.pinned_card_key)

    @admin.display(description="Pinned card key (public JWK)")
    def pinned_card_key_shown(self, credential: PeerCredential) -> str:
        return json.dumps(credential.pinned_card_key, sort_keys=True) if credential.pinned_card_key else "—"

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # The actions below are the only change; the form stays read-only (no save button).
        return obj is None and bool(request.user.has_perm("peers.change_peercredential"))

    def _set_policy(self, request: HttpRequest, queryset: QuerySet[PeerCredential], policy: str) -> None:
        for pk in queryset.values_list("pk", flat=True):
            peer_credential_set_card_signature_policy(credential_pk=pk, policy=policy)
        self.message_user(request, f"{queryset.count()} credential(s) now {policy}.", messages.SUCCESS)

    @admin.action(description="Card signatures: require (refuse unsigned or bad cards)", permissions=["change"])
    def require_signed_cards(self, request: HttpRequest, queryset: QuerySet[PeerCredential]) -> None:
        self._set_policy(request, queryset, CardSignaturePolicy.REQUIRE)

    @admin.action(description="Card signatures: verify if present (default)", permissions=["change"])
    def verify_cards_if_signed(self, request: HttpRequest, queryset: QuerySet[PeerCredential]) -> None:
        self._set_policy(request, queryset, CardSignaturePolicy.VERIFY_IF_PRESENT)

    @admin.action(description="Card signatures: ignore", permissions=["change"])
    def ignore_card_signatures(self, request: HttpRequest, queryset: QuerySet[PeerCredential]) -> None:
        self._set_policy(request, queryset, CardSignaturePolicy.IGNORE)


@admin.register(PeerBinding)
class PeerBindingAdmin(admin.ModelAdmin):
    """The names tenants' workflows call peers by (an MCP serverId, an A2A peer name): operators
    point a name at another URL here without editing a workflow."""

    list_display = ("binding_id", "protocol", "tenant", "url", "credential", "updated_at")
    list_filter = ("protocol", "tenant")
    search_fields = ("binding_id", "url")
    list_select_related = ("tenant", "credential")
    readonly_fields = ("created_at", "updated_at")
