"""The host's `a2a` and `mcp` facets as rows operators edit, plus their append-only audit trails."""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

MAX_REFRESH_WINDOW_DAYS = 90  # interop.md §The refresh SLA


class FacetProtocol(models.TextChoices):
    A2A = "a2a", "A2A"
    MCP = "mcp", "MCP"


class Facet(models.Model):
    """Fields common to both facets. One row per protocol (the primary key is the protocol)."""

    protocol = models.CharField(max_length=3, choices=FacetProtocol.choices, primary_key=True)
    versions = models.JSONField(
        default=list, help_text="Offered versions: a2a `major.minor`, mcp revision dates. At least one."
    )
    preferred_version = models.CharField(max_length=16, help_text="Served when the peer names none.")
    minimum_version = models.CharField(
        max_length=16, help_text="The floor: below it negotiation fails closed (minimumVersion / minimumRevision)."
    )
    profiles = models.JSONField(default=list, blank=True, help_text="e.g. a2a-1.0 / mcp-2026-07-28; never -legacy.")
    refresh_window_days = models.PositiveSmallIntegerField(
        default=30,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_REFRESH_WINDOW_DAYS)],
        help_text="How long an evaluation of the offered list stays fresh (at most 90 days).",
    )
    refreshed_at = models.DateField(
        null=True, blank=True, editable=False, help_text="Last successful re-evaluation against the registry."
    )
    updated_at = models.DateTimeField(auto_now=True)

    # a2a-only
    agent_card_path = models.CharField(max_length=200, default="/.well-known/agent-card.json", blank=True)
    streaming = models.BooleanField(default=True)
    push_notifications = models.BooleanField(default=True)
    durable_tasks = models.BooleanField(default=True)
    agent_cards = models.BooleanField(default=False, help_text="Per-agent cards through a2aTenant routing values.")

    # mcp-only
    features = models.JSONField(default=list, blank=True)
    server_paths = models.JSONField(default=list, blank=True, help_text="Mount paths, e.g. /mcp.")
    transports = models.JSONField(default=list, blank=True, help_text="serverMount.transports: stdio, streamable-http.")
    mrtr_max_rounds = models.PositiveSmallIntegerField(
        default=4, validators=[MinValueValidator(1), MaxValueValidator(16)]
    )

    class Meta:
        ordering = ["protocol"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(refresh_window_days__gte=1, refresh_window_days__lte=MAX_REFRESH_WINDOW_DAYS),
                name="facet_refresh_window_at_most_90_days",
            ),
            models.CheckConstraint(
                condition=models.Q(mrtr_max_rounds__gte=1, mrtr_max_rounds__lte=16), name="facet_mrtr_rounds_1_16"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.protocol} facet"

    def clean(self) -> None:
        from apps.facets.services import facet_fields
        from apps.facets.validation import facet_errors

        errors = facet_errors(self.protocol, facet_fields(self))  # type: ignore[arg-type]
        if errors:
            raise ValidationError(errors)

    def is_stale(self, today: dt.date) -> bool:
        """An advertisement older than its window is non-conformant (interop.md §The refresh SLA)."""
        if self.refreshed_at is None:
            return True
        return (today - self.refreshed_at).days > self.refresh_window_days


class FacetChange(models.Model):
    """Who changed a facet, what, before and after. Append-only."""

    protocol = models.CharField(max_length=3, choices=FacetProtocol.choices)
    actor = models.CharField(max_length=200, help_text="Operator username, or the service that changed it.")
    before = models.JSONField(null=True)
    after = models.JSONField()
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.protocol} facet changed by {self.actor} at {self.at:%Y-%m-%d %H:%M}"


class FacetRefresh(models.Model):
    """One re-evaluation of an offered list against the upstream registry file. Append-only."""

    protocol = models.CharField(max_length=3, choices=FacetProtocol.choices)
    at = models.DateTimeField(auto_now_add=True)
    evaluated_on = models.DateField()
    ok = models.BooleanField()
    offered = models.JSONField()
    unknown = models.JSONField(default=list, help_text="Offered versions the registry does not know.")
    registry_source = models.CharField(max_length=500)
    registry_updated = models.CharField(max_length=40, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.protocol} registry evaluation on {self.evaluated_on}: {'ok' if self.ok else 'unknown versions'}"
