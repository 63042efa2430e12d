"""Operators edit the host's A2A skill routing and manage the card signing keys; the A2A message
records and the key audit trail are read-only evidence. The agents' and the facets' pages, which
show the cards exactly as served, are registered here, on the floor that serves them.

Signing keys (issue 21): the add form takes only the algorithm (the host generates the pair);
activate and retire are actions calling the audited services (STYLE.md habit 15). No page ever
renders a private key: the sealed column is in no form, list or read-only field.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html

from apps.a2a.card import public_card_cached
from apps.a2a.models import (
    CardSigningKey,
    CardSigningKeyChange,
    CardSigningKeyState,
    SkillRoute,
    SkillRoutePin,
    SkillRoutePinChange,
    TaskMessage,
)
from apps.a2a.previews import agent_card_preview, served_card_wire
from apps.a2a.selectors import card_path_configured
from apps.a2a.services import (
    card_key_activate,
    card_key_generate,
    card_key_retire,
    skill_route_pin,
    skill_route_unpin,
)
from apps.a2a.signing import card_sign, card_signing_key_active, grace_seconds, jwks_url, public_jwk_of
from apps.agents.admin import AgentAdminBase
from apps.agents.models import Agent
from apps.core.actors import admin_actor
from apps.core.admin_diff import ChangeDiffAdminMixin
from apps.core.admin_messages import named
from apps.core.admin_read_only import ReadOnlyAdminMixin
from apps.core.admin_service_writes import ServiceWritesAdminMixin
from apps.core.errors import OpenWopError
from apps.facets.admin import FacetAdminBase
from apps.facets.models import Facet
from apps.runs.a2a_wire import to_wire


@admin.register(SkillRoute)
class SkillRouteAdmin(admin.ModelAdmin):
    list_display = ("workflow_id", "name", "is_default", "enabled", "position", "updated_at")
    list_editable = ("enabled", "position")
    list_filter = ("enabled", "is_default")
    search_fields = ("workflow_id", "name")
    readonly_fields = ("updated_at",)


@admin.register(SkillRoutePin)
class SkillRoutePinAdmin(ServiceWritesAdminMixin, admin.ModelAdmin):
    """The host's routing choice: add a pin to route only that skill, delete it to route every
    enabled route again. Both call the audited services; the routing table is never edited here."""

    list_display = ("route", "actor", "pinned_at")
    fields = ("route",)
    readonly_fields = ("actor", "pinned_at")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # re-pin by adding: one row, written by the service only

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and not SkillRoutePin.objects.exists()

    def save_model(self, request: HttpRequest, obj: SkillRoutePin, form: Any, change: bool) -> None:
        saved = skill_route_pin(workflow_id=obj.route.workflow_id, actor=f"admin:{request.user.get_username()}")
        obj.pk, obj.actor, obj.pinned_at = saved.pk, saved.actor, saved.pinned_at

    def delete_model(self, request: HttpRequest, obj: SkillRoutePin) -> None:
        skill_route_unpin(actor=f"admin:{request.user.get_username()}")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[SkillRoutePin]) -> None:
        if queryset.exists():
            skill_route_unpin(actor=f"admin:{request.user.get_username()}")


@admin.register(SkillRoutePinChange)
class SkillRoutePinChangeAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Who pinned or unpinned the routing, and when: evidence, never edited."""

    list_display = ("at", "action", "before", "after", "actor")
    list_filter = ("action",)
    readonly_fields = ("at", "action", "before", "after", "actor")


@admin.register(TaskMessage)
class TaskMessageAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The messages a task received, kept as evidence: never added, changed or deleted here."""

    list_display = ("message_id", "run", "tenant", "principal", "created_at")
    list_filter = ("tenant",)
    search_fields = ("message_id", "run__run_id")
    list_select_related = ("tenant", "run")
    readonly_fields = ("tenant", "run", "principal", "message_id", "document", "created_at")


class CardSigningKeyAddForm(forms.ModelForm):
    """Only the algorithm: the key pair, its kid and its sealing are the host's to make."""

    class Meta:
        model = CardSigningKey
        fields = ("algorithm",)


DEFAULT_CARD_PATH = "/.well-known/agent-card.json"  # the facet's default agent_card_path
SHORT_DIGEST = 16  # characters of a digest the lists show (the whole one is its title)


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def jwk_thumbprint(jwk: dict[str, Any]) -> str:
    """The RFC 7638 thumbprint of a public JWK: SHA-256 of its required members, lexicographic
    and without whitespace, base64url."""
    members = {name: jwk[name] for name in ("crv", "e", "kty", "n", "x", "y") if name in jwk}
    return _b64url(hashlib.sha256(json.dumps(members, sort_keys=True, separators=(",", ":")).encode()).digest())


def served_card_summary() -> dict[str, Any]:
    """The public card as served now, summed up for the key changelist (issue 53: the list no
    longer embeds the whole card): the kid and alg of each signature's protected header, the
    SHA-256 of the card as served, and where it is served."""
    card = to_wire(card_sign(public_card_cached()))
    signers = []
    for signature in card.get("signatures", []):
        protected = signature["protected"]
        header = json.loads(base64.urlsafe_b64decode(protected + "=" * (-len(protected) % 4)))
        signers.append(f"{header.get('kid', '?')} ({header.get('alg', '?')})")
    digest = hashlib.sha256(json.dumps(card, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    url = card_path_configured() or DEFAULT_CARD_PATH
    return {"signers": signers, "digest": digest, "short_digest": digest[:SHORT_DIGEST], "url": url}


@admin.register(CardSigningKey)
class CardSigningKeyAdmin(ServiceWritesAdminMixin, admin.ModelAdmin):
    """Generate (add form), activate, retire. Keys are never edited or deleted: a retired key's
    row is its audit subject, and the JWKS drops it by itself once its grace window passed."""

    list_display = ("kid", "algorithm", "state", "created_at", "activated_at", "retired_at", "in_jwks", "thumbprint")
    list_filter = ("state", "algorithm")
    ordering = ("-created_at", "-id")
    actions = ("activate_key", "retire_keys")
    readonly_fields = (
        "kid", "algorithm", "state", "public_key", "in_jwks", "created_at", "activated_at", "retired_at",
    )  # fmt: skip
    fields = readonly_fields
    form = CardSigningKeyAddForm

    def get_fields(self, request: HttpRequest, obj: CardSigningKey | None = None) -> Any:
        return ("algorithm",) if obj is None else self.readonly_fields

    def get_readonly_fields(self, request: HttpRequest, obj: CardSigningKey | None = None) -> Any:
        return () if obj is None else self.readonly_fields

    def has_change_permission(self, request: HttpRequest, obj: CardSigningKey | None = None) -> bool:
        return obj is None and super().has_change_permission(request)  # detail pages are read-only

    def has_delete_permission(self, request: HttpRequest, obj: CardSigningKey | None = None) -> bool:
        return False

    def has_manage_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("a2a.change_cardsigningkey")

    @admin.display(description="Public key (JWK)")
    def public_key(self, obj: CardSigningKey) -> str:
        return format_html("<pre>{}</pre>", json.dumps(public_jwk_of(obj), indent=2, sort_keys=True))

    @admin.display(description="JWK thumbprint")
    def thumbprint(self, obj: CardSigningKey) -> str:
        digest = jwk_thumbprint(public_jwk_of(obj))
        return format_html('<code title="{}">{}…</code>', digest, digest[:SHORT_DIGEST])

    @admin.display(description="In the JWKS", boolean=True)
    def in_jwks(self, obj: CardSigningKey) -> bool:
        if obj.state == CardSigningKeyState.ACTIVE:
            return True
        if obj.state != CardSigningKeyState.RETIRED or obj.activated_at is None or obj.retired_at is None:
            return False
        return (timezone.now() - obj.retired_at).total_seconds() < grace_seconds()

    def save_model(self, request: HttpRequest, obj: CardSigningKey, form: Any, change: bool) -> None:
        if change:
            return  # nothing is editable (has_change_permission is False for a key)
        created = card_key_generate(algorithm=obj.algorithm, actor=admin_actor(request.user.get_username()))
        obj.pk = created.pk
        obj.refresh_from_db()

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if request.method == "GET":
            active = card_signing_key_active()
            if active is None:
                self.message_user(
                    request,
                    "No signing key is active: agent cards are served unsigned. Generate a key and activate it.",
                    messages.WARNING,
                )
            else:
                self.message_user(
                    request, f"Agent cards are signed by kid {active.kid} ({active.algorithm}); JWKS: {jwks_url()}.",
                    messages.INFO,
                )  # fmt: skip
        extra_context = {**(extra_context or {}), "served_card": served_card_summary()}
        return super().changelist_view(request, extra_context)

    @admin.action(description="Activate the selected key (retires the active one)", permissions=["manage"])
    def activate_key(self, request: HttpRequest, queryset: QuerySet[CardSigningKey]) -> None:
        chosen = list(queryset.values_list("pk", flat=True)[:2])
        if len(chosen) != 1:
            self.message_user(request, "Select exactly one key to activate.", messages.ERROR)
            return
        try:
            key = card_key_activate(key_pk=chosen[0], actor=admin_actor(request.user.get_username()))
        except OpenWopError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return
        self.message_user(request, f"Key {key.kid} now signs every agent card.", messages.SUCCESS)

    @admin.action(description="Retire the selected keys", permissions=["manage"])
    def retire_keys(self, request: HttpRequest, queryset: QuerySet[CardSigningKey]) -> None:
        retired = []
        for pk, kid in queryset.values_list("pk", "kid"):
            card_key_retire(key_pk=pk, actor=admin_actor(request.user.get_username()))
            retired.append(kid)
        self.message_user(request, f"Retired key {named(retired)}.", messages.SUCCESS)


@admin.register(CardSigningKeyChange)
class CardSigningKeyChangeAdmin(ChangeDiffAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """The audit trail of signing keys: read-only (append-only table)."""

    list_display = ("at", "action", "kid", "actor", "changed_fields")
    fields = readonly_fields = ("kid", "action", "actor", "at", "difference")
    list_filter = ("action",)
    search_fields = ("kid", "actor")


# ---------------------------------------------------------------------------------------------
# The pages of lower floors that show a card as served


@admin.register(Agent)
class AgentAdmin(AgentAdminBase):
    """The agent's page (apps/agents/admin.py), with its A2A card exactly as a caller of its tenant
    is served it."""

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> tuple[str, ...]:
        fields = tuple(super().get_readonly_fields(request, obj))
        return fields if obj is None else (*fields, "card_preview")

    @admin.display(description="A2A card (as served)")
    def card_preview(self, obj: Agent) -> str:
        card = agent_card_preview(obj)
        if card is None:
            return "No card is served: the agent is unpublished, has no routed workflow, or per-agent cards are off."
        return format_html('<pre class="agent-card-preview" tabindex="0">{}</pre>', card)


@admin.register(Facet)
class FacetAdmin(FacetAdminBase):
    """The facets' page (apps/facets/admin.py), its preview with the public agent card as served."""

    def served_card(self) -> dict[str, Any] | None:
        return served_card_wire()
