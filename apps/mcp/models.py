"""What the MCP mount itself must remember: spent requestState nonces and handshake-era sessions."""

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


class McpSession(TenantOwnedModel):
    """A handshake-era (2025-06-18 / 2025-11-25) session minted by `initialize`.

    Kept in the database so any web process can serve the session's later requests. Only the
    SHA-256 of the `Mcp-Session-Id` is stored; the session belongs to one tenant and one principal,
    and a lookup by anyone else finds nothing (the same answer as an unknown id). An ended session's
    row is deleted, and lapsed rows are swept when the tenant opens the next one: either way its id
    then answers exactly as an id never issued.
    """

    id_digest = models.CharField(max_length=64, unique=True)
    subject_id = models.CharField(max_length=255)
    protocol_version = models.CharField(max_length=10)
    client_capabilities = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    class Meta(TenantOwnedModel.Meta):
        indexes = [models.Index(fields=["expires_at"], name="mcp_session_expiry")]

    def __str__(self) -> str:
        return f"MCP {self.protocol_version} session of {self.subject_id}"
