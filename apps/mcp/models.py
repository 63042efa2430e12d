"""What the MCP mount itself must remember: spent requestState nonces. (Inbound trace context now
lives on the run itself: `Run.traceparent`.)"""

from __future__ import annotations

from django.db import models

from apps.tenants.models import TenantOwnedModel


class RequestStateNonce(TenantOwnedModel):
    """A `requestState` that has been redeemed. HMAC alone would let a captured state be replayed
    (openwop-v2 reference (i) 12): the unique nonce makes each one single-use, in the database, so
    it holds across every web process. Rows past `expires_at` can go; the HMAC refuses them anyway."""

    nonce = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(auto_now_add=True)

    class Meta(TenantOwnedModel.Meta):
        indexes = [models.Index(fields=["expires_at"], name="mcp_nonce_expiry")]

    def __str__(self) -> str:
        return f"requestState nonce used at {self.used_at:%Y-%m-%d %H:%M:%S}"
