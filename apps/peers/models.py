"""Credentials a tenant registers for the peers its workflows call (security-defaults §Onward hops).

An outbound A2A/MCP call never forwards the credential its run came in with: it presents the one
the tenant registered for that destination, bound to the destination's origin, sealed at rest.
"""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models

from apps.tenants.models import TenantOwnedModel


class CardSignaturePolicy(models.TextChoices):
    """What a peer's agent card must prove before anything is sent to it (A2A 1.0 §Agent
    Card signing: "a consuming host SHOULD verify before invoking and MAY refuse an unsigned card")."""

    REQUIRE = "require", "Require a valid signature"
    VERIFY_IF_PRESENT = "verify-if-present", "Verify a signature when the card carries one"
    IGNORE = "ignore", "Do not check signatures"


class PeerCredential(TenantOwnedModel):
    """One outbound credential: `Authorization: <scheme> <secret>` to one peer origin, and no other."""

    credential_id = models.CharField(max_length=128, unique=True, help_text="Opaque; names no tenant.")
    origin = models.CharField(max_length=300, help_text="The only origin it is sent to: https://host[:port].")
    scheme = models.CharField(max_length=32, default="Bearer")
    secret_sealed = models.BinaryField(editable=False, help_text="Fernet token (apps.core.sealing, peer purpose).")
    label = models.CharField(max_length=200, blank=True, default="")
    card_signature_policy = models.CharField(
        max_length=32, choices=CardSignaturePolicy.choices, default=CardSignaturePolicy.VERIFY_IF_PRESENT
    )
    pinned_card_key = models.JSONField(
        null=True,
        blank=True,
        default=None,
        help_text="A public JWK the peer's card must be signed with, instead of its jku (public material only).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(TenantOwnedModel.Meta):
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(origin__startswith="https://"), name="peer_credential_origin_https"
            ),
            models.CheckConstraint(
                condition=models.Q(card_signature_policy__in=CardSignaturePolicy.values),
                name="peer_credential_card_signature_policy_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.credential_id  # never the secret


class PeerBindingProtocol(models.TextChoices):
    A2A = "a2a", "A2A agent"
    MCP = "mcp", "MCP server"


class PeerBinding(TenantOwnedModel):
    """A name a tenant's workflows use for one peer: `serverId` for the MCP client host service
    (`ctx.mcp.<method>`, host-services.md §mcp), a peer name for the A2A relay. The workflow names
    the binding, never the URL, so operators move a peer without editing a workflow; an unknown
    name fails the node `not_found`. An optional registered credential goes with it (only to its
    own origin, as every peer credential)."""

    binding_id = models.CharField(
        max_length=128,
        validators=[RegexValidator(r"^[A-Za-z0-9._~:-]{1,128}$", "A binding id is 1-128 of [A-Za-z0-9._~:-].")],
        help_text="The name workflows use (an MCP serverId, an A2A peer name).",
    )
    protocol = models.CharField(max_length=8, choices=PeerBindingProtocol.choices)
    url = models.CharField(max_length=2048, help_text="The MCP endpoint, or the A2A agent (its base or card URL).")
    credential = models.ForeignKey(
        PeerCredential,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Presented to the peer when set (its origin must be the URL's).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta(TenantOwnedModel.Meta):
        ordering = ["protocol", "binding_id"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "protocol", "binding_id"], name="peer_binding_unique"),
            models.CheckConstraint(
                condition=models.Q(protocol__in=PeerBindingProtocol.values), name="peer_binding_protocol_known"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.protocol}:{self.binding_id}"
