"""Per-tenant retention: overrides of the host's windows and the legal hold (issue 36 item 1).

The host's windows are settings (OPENWOP_RETENTION_RUNS_DAYS, OPENWOP_RETENTION_RECORDS_DAYS); a
tenant without a `RetentionPolicy` row keeps its data for exactly those. A row overrides either
window (null: the host's) or holds everything of the tenant (`legal_hold`). Written only through
`retention_set` (apps/retention/services.py), which writes a `RetentionChange` in the same
transaction.
"""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models

from apps.tenants.models import Tenant


class RetentionPolicy(models.Model):
    """One tenant's windows and hold. Host-level table (not TenantOwnedModel): the retention job
    reads every tenant's row at once."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="retention_policy")
    runs_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Days a run and all that hangs off it are kept once terminal; empty: the host's.",
    )
    records_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Days negotiation records and other host events are kept; empty: the host's.",
    )
    legal_hold = models.BooleanField(default=False, help_text="Nothing of this tenant expires while set.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant_id"]
        verbose_name_plural = "retention policies"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(runs_days__isnull=True) | models.Q(runs_days__gte=1), name="retention_runs_days_min"
            ),
            models.CheckConstraint(
                condition=models.Q(records_days__isnull=True) | models.Q(records_days__gte=1),
                name="retention_records_days_min",
            ),
        ]

    def __str__(self) -> str:
        return f"retention of {self.tenant}"


class RetentionChange(models.Model):
    """Who changed a tenant's retention, before and after. Append-only (a trigger refuses UPDATE
    and DELETE); it keeps the tenant's slug as text, so it outlives the tenant."""

    tenant_slug = models.CharField(max_length=128)
    actor = models.CharField(max_length=200, help_text="Operator username, or the command that changed it.")
    before = models.JSONField(help_text="{runs_days, records_days, legal_hold}; null days: the host's.")
    after = models.JSONField()
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"retention of {self.tenant_slug} changed by {self.actor} at {self.at:%Y-%m-%d %H:%M}"
