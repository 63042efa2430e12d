"""What the MCP mount itself must remember: spent requestState nonces, and inbound trace context."""

from __future__ import annotations

from django.db import models

from apps.runs.models import Run
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


class RunTraceContext(TenantOwnedModel):
    """The W3C trace context an MCP `tools/call` arrived with (interop.md §Trace context).

    Kept here until runs grow a field of their own; it is observability only and never selects a
    tenant, principal or scope.
    """

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="+")
    traceparent = models.CharField(max_length=55)
    tracestate = models.CharField(max_length=512, blank=True, default="")
    source = models.CharField(max_length=8, choices=[("meta", "_meta"), ("header", "HTTP header")])
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta(TenantOwnedModel.Meta):
        pass

    def __str__(self) -> str:
        return f"{self.run_id}: {self.traceparent}"
