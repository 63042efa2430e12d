"""Trusted token issuers: the OAuth 2.1 / OIDC lanes of identity.md §2, and their audit.

A bearer that is not an API key is a JWT from one of these issuers, or it is refused. Operators
add issuers through the admin or `manage.py oauth_issuer` (both call apps/oauth/services.py, which
fetches the issuer's metadata and JWKS through the egress guard and audits every change).
"""

from __future__ import annotations

from django.db import models

ALLOWED_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "PS256")
DEFAULT_ALGORITHMS = ["RS256", "ES256"]
METHOD_FAMILIES = ("mcp:tools", "mcp:resources", "mcp:prompts", "mcp:tasks", "mcp:other", "a2a", "rest")


def default_algorithms() -> list[str]:
    return list(DEFAULT_ALGORITHMS)


class IssuerLane(models.TextChoices):
    OIDC = "oidc", "oidc"
    OAUTH2 = "oauth2", "oauth2"


class SubjectKindChoice(models.TextChoices):
    USER = "user", "user"
    AGENT = "agent", "agent"


class RevocationMode(models.TextChoices):
    """identity.md §6: how a revoked token stops working."""

    EXP_AND_RECHECK = "exp-and-recheck", "Expiry, and RFC 7662 introspection at least once per window"
    EXP_ONLY = "exp-only", "Expiry only (token lifetime bounded by the window)"


class TrustedIssuer(models.Model):
    """One authorization server whose access tokens this host accepts, and how they map to a Subject."""

    issuer = models.CharField(
        max_length=500, unique=True, help_text="The exact `iss` of its tokens: an https URL (compared byte for byte)."
    )
    lane = models.CharField(max_length=8, choices=IssuerLane.choices, default=IssuerLane.OIDC)
    audience = models.CharField(
        max_length=500,
        blank=True,
        help_text="The `aud` its tokens must carry. Empty: the host's public URL of the door called "
        "(the MCP server URL for MCP, the public URL for A2A and REST).",
    )
    tenant = models.ForeignKey(
        "tenants.Tenant",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Every token of this issuer acts in this tenant. Either this or a tenant claim.",
    )
    tenant_claim = models.CharField(
        max_length=100,
        blank=True,
        help_text="Or: the claim whose value is the tenant slug (only one of the allowed tenants).",
    )
    allowed_tenants = models.ManyToManyField(
        "tenants.Tenant", blank=True, related_name="+", help_text="The tenants the tenant claim may name."
    )
    subject_claim = models.CharField(max_length=100, default="sub")
    kind_claim = models.CharField(
        max_length=100, blank=True, help_text='Claim whose value is "user" or "agent"; empty: the default kind.'
    )
    default_kind = models.CharField(max_length=5, choices=SubjectKindChoice.choices, default=SubjectKindChoice.USER)
    algorithms = models.JSONField(
        default=default_algorithms,
        help_text="Accepted signature algorithms, a subset of " + ", ".join(ALLOWED_ALGORITHMS) + " (never none/HS*).",
    )
    revocation = models.CharField(max_length=16, choices=RevocationMode.choices, default=RevocationMode.EXP_AND_RECHECK)
    revocation_window_seconds = models.PositiveIntegerField(
        default=300,
        help_text="exp-and-recheck: the longest a revoked token may still be accepted. exp-only: the longest "
        "token lifetime accepted (keep it <= 3600).",
    )
    introspection_client_id = models.CharField(max_length=200, blank=True)
    introspection_client_secret = models.TextField(
        blank=True, help_text="Sealed at rest (apps.core.sealing); write-only, never shown back."
    )
    required_scopes = models.JSONField(
        default=dict,
        blank=True,
        help_text="Method family -> scopes a token needs: " + ", ".join(METHOD_FAMILIES) + ".",
    )
    enabled = models.BooleanField(default=True)
    metadata = models.JSONField(null=True, blank=True, editable=False)
    jwks = models.JSONField(null=True, blank=True, editable=False)
    fetched_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["issuer"]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(tenant__isnull=False) & models.Q(tenant_claim=""))
                | (models.Q(tenant__isnull=True) & ~models.Q(tenant_claim="")),
                name="trusted_issuer_one_tenant_mapping",
            ),
            models.CheckConstraint(condition=models.Q(issuer__startswith="https://"), name="trusted_issuer_https"),
            models.CheckConstraint(
                condition=models.Q(revocation_window_seconds__gte=1), name="trusted_issuer_window_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(revocation__in=RevocationMode.values), name="trusted_issuer_revocation_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.issuer


class TrustedIssuerChange(models.Model):
    """Who changed a trusted issuer, what, before and after (secrets redacted). Append-only."""

    issuer = models.CharField(max_length=500)
    actor = models.CharField(max_length=200, help_text="Operator username, or the service that changed it.")
    before = models.JSONField(null=True)
    after = models.JSONField(help_text='The row after the change; {"removed": true} for a removal.')
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.issuer} changed by {self.actor} at {self.at:%Y-%m-%d %H:%M}"
