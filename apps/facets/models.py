"""The host's `a2a` and `mcp` facets as rows operators edit, plus their append-only audit trails."""

from __future__ import annotations

import datetime as dt

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

MAX_REFRESH_WINDOW_DAYS = 90  # interop.md §The refresh SLA
# A scheduled floor is a version and the instant it takes effect, both or neither.
SCHEDULE_COMPLETE = models.Q(scheduled_minimum_version="", scheduled_at__isnull=True) | (
    ~models.Q(scheduled_minimum_version="") & models.Q(scheduled_at__isnull=False)
)


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

    # A scheduled host floor (issue 24): the beat job `facets.apply_scheduled_floors` moves it into
    # minimum_version at scheduled_at. Set through `facet_floor_schedule` (`facet_set --at`).
    scheduled_minimum_version = models.CharField(
        max_length=16, blank=True, editable=False, help_text="The floor that takes effect at scheduled_at."
    )
    scheduled_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["protocol"]
        constraints = [
            models.CheckConstraint(condition=SCHEDULE_COMPLETE, name="facet_schedule_complete"),
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
        verbose_name_plural = "facet refreshes"  # not Django's "facet refreshs"

    def __str__(self) -> str:
        return f"{self.protocol} registry evaluation on {self.evaluated_on}: {'ok' if self.ok else 'unknown versions'}"


class VersionPolicy(models.Model):
    """A tenant's (agent is None) or one agent's floor for one protocol; never looser than the host
    facet's (apps/facets/policy.py). Written only through `version_policy_set` / `_clear` (audited)."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="version_policies")
    agent = models.ForeignKey(
        "agents.Agent",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="version_policies",
        help_text="Empty: the floor of the whole tenant.",
    )
    protocol = models.CharField(max_length=3, choices=FacetProtocol.choices)
    minimum_version = models.CharField(
        max_length=16, blank=True, help_text="The floor in force at this level; empty: none of its own."
    )
    scheduled_minimum_version = models.CharField(
        max_length=16, blank=True, help_text="A floor that takes effect at scheduled_at; empty: none."
    )
    scheduled_at = models.DateTimeField(null=True, blank=True, help_text="When the scheduled floor takes effect.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant_id", "protocol", "agent_id"]  # no join: rows are locked FOR UPDATE
        verbose_name_plural = "version policies"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "agent", "protocol"], name="version_policy_one_per_agent"),
            models.UniqueConstraint(
                fields=["tenant", "protocol"],
                condition=models.Q(agent__isnull=True),
                name="version_policy_one_per_tenant",
            ),
            models.CheckConstraint(condition=SCHEDULE_COMPLETE, name="version_policy_schedule_complete"),
        ]

    def __str__(self) -> str:
        level = f"agent {self.agent.agent_id}" if self.agent_id is not None and self.agent else "tenant"
        return f"{self.protocol} floor of {self.tenant} ({level})"


class VersionPolicyChange(models.Model):
    """Who changed a version policy, what, before and after. Append-only; it keeps the tenant's
    slug and the agent's agentId as text, so it outlives both."""

    tenant_slug = models.CharField(max_length=128)
    agent_id = models.CharField(max_length=128, blank=True, help_text="Empty for the tenant-wide policy.")
    protocol = models.CharField(max_length=3, choices=FacetProtocol.choices)
    actor = models.CharField(max_length=200, help_text="Operator username, or the service that changed it.")
    before = models.JSONField(null=True)
    after = models.JSONField()
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        level = f"agent {self.agent_id}" if self.agent_id else "tenant"
        return (
            f"{self.protocol} floor of {self.tenant_slug} ({level}) changed by {self.actor} at {self.at:%Y-%m-%d %H:%M}"
        )
