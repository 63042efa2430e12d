"""Credentials a tenant registers for the peers its workflows call (security-defaults §Onward hops).

An outbound A2A/MCP call never forwards the credential its run came in with: it presents the one
the tenant registered for that destination, bound to the destination's origin, sealed at rest.
"""

from __future__ import annotations

from django.db import models

from apps.tenants.models import TenantOwnedModel


class PeerCredential(TenantOwnedModel):
    """One outbound credential: `Authorization: <scheme> <secret>` to one peer origin, and no other."""

    credential_id = models.CharField(max_length=128, unique=True, help_text="Opaque; names no tenant.")
    origin = models.CharField(max_length=300, help_text="The only origin it is sent to: https://host[:port].")
    scheme = models.CharField(max_length=32, default="Bearer")
    secret_sealed = models.BinaryField(editable=False, help_text="Fernet token (apps.core.sealing, peer purpose).")
    label = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(TenantOwnedModel.Meta):
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(origin__startswith="https://"), name="peer_credential_origin_https"
            ),
        ]

    def __str__(self) -> str:
        return self.credential_id  # never the secret
