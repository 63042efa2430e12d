"""Runs, their append-only event log, their interrupts, and idempotency records.

A run is its event log (events.md): every state change of a `Run` row is written in the same
transaction as the `RunEvent` rows that record it, under the run's row lock, so the log and the
row never disagree and sequences have no gaps.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import models

from apps.agents.models import Workflow
from apps.tenants.models import TenantOwnedModel

BOUND_ID_PATTERN = r"^(anon:)?[A-Za-z0-9._~-]{1,128}/[A-Za-z0-9._~-]{16,128}$"


class RunStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    WAITING_APPROVAL = "waiting-approval"
    WAITING_INPUT = "waiting-input"
    WAITING_EXTERNAL = "waiting-external"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
WAITING_STATUSES = frozenset({RunStatus.WAITING_APPROVAL, RunStatus.WAITING_INPUT, RunStatus.WAITING_EXTERNAL})
# Statuses a worker advances; a waiting run moves only when its interrupt is resolved.
RUNNABLE_STATUSES = frozenset({RunStatus.PENDING, RunStatus.RUNNING, RunStatus.CANCELLING})
# `Run.wake_at` of a row written by a release that did not know the column: due at once.
WAKE_AT_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TERMINAL_EVENT_TYPES = frozenset({"run.completed", "run.failed", "run.cancelled"})


class RunTransport(models.TextChoices):
    """The door a run came in through (runs.md §The start event: `run.started.transport`)."""

    REST = "rest", "REST"  # labels as the protocols spell themselves (admin showed "A2a", "Mcp")
    A2A = "a2a", "A2A"
    MCP = "mcp", "MCP"


class Run(TenantOwnedModel):
    # Every index of the table but the sweeper's and the claim's starts with the tenant: no index of its own.
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+", db_index=False)
    # Unique by a constraint, not `unique=True`, which adds a second, pattern-ops index nothing uses
    # (every index is paid on every run's insert).
    run_id = models.CharField(max_length=260, help_text="Tenant-bound `<tenant>/<opaque>`.")
    owner = models.JSONField(help_text="RunSnapshot.owner: {tenant, subject}, fixed at creation.")
    workflow = models.ForeignKey(Workflow, on_delete=models.PROTECT, related_name="runs")
    definition = models.JSONField(help_text="The workflow definition as it was when the run was created.")
    inputs = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.PENDING)
    transport = models.CharField(max_length=8, choices=RunTransport.choices)
    context_id = models.CharField(max_length=256, blank=True, default="")
    # The agent a run was started through (A2A `tenant: R`), pinned for RunSnapshot.agent (RFC 0202).
    agent_id = models.CharField(max_length=128, blank=True, default="")
    # interop.md §Trace context: the caller's W3C trace context, or one minted at creation. Never
    # authority; outbound calls of the run carry a child of it (apps.peers).
    traceparent = models.CharField(max_length=55, blank=True, default="")
    tracestate = models.CharField(max_length=512, blank=True, default="")
    outputs = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    node_index = models.PositiveIntegerField(default=0, help_text="Position of the next node to execute.")
    current_node_id = models.CharField(max_length=128, blank=True, default="")
    variables = models.JSONField(default=dict, help_text="Outputs of completed nodes, by node id.")
    last_sequence = models.PositiveIntegerField(default=0, help_text="Sequence of the newest event.")
    cancel_reason = models.CharField(max_length=500, blank=True, default="")
    cancelled_by = models.CharField(max_length=256, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Executor lease: a worker owns the run while it advances it; a dead worker's lease expires
    # and the sweeper makes the run claimable again (engine.py).
    queue = models.CharField(max_length=200, help_text="Celery queue the run's steps are sent to.")
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # When the last wake-up (`runs.advance`) went out for it; NULL: the send failed, none is out.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    # The earliest a worker may claim the run (docs/contributors/run-executor.md): its creation
    # time, or the deadline of the clock wait it is parked on. A database default, so a row the
    # previous release inserts (which does not know the column) is due at once.
    wake_at = models.DateTimeField(db_default=WAKE_AT_EPOCH, help_text="Claimable from (a parked run's wake-up time).")

    class Meta(TenantOwnedModel.Meta):
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "-created_at", "-id"], name="run_list_newest_first"),
            # A2A ListTasks pages newest status first: without it each page sorts the whole tenant.
            models.Index(fields=["tenant", "-updated_at", "-id"], name="run_list_status_newest"),
            # ListTasks / listRuns filtered by status (and its exact totalSize): the tenant's runs
            # of those statuses, newest status first, without reading any other tenant's rows.
            models.Index(fields=["tenant", "status", "-updated_at", "-id"], name="run_list_by_status"),
            # ListTasks filtered by contextId (and its exact totalSize).
            models.Index(fields=["tenant", "context_id"], name="run_list_by_context"),
            models.Index(fields=["status", "lease_expires_at"], name="run_sweep"),
            # The executor's claim (engine.run_claim_next): a queue's tenants with an unleased
            # runnable run, and each tenant's due ones, oldest wake-up first.
            models.Index(
                fields=["queue", "tenant", "wake_at"],
                name="run_claim",
                condition=models.Q(status__in=sorted(RUNNABLE_STATUSES), lease_owner=""),
            ),
            # A tenant's runs in progress (leased), counted against its cap at every claim.
            models.Index(fields=["tenant"], name="run_in_progress", condition=~models.Q(lease_owner="")),
        ]
        constraints = [
            models.UniqueConstraint(fields=["run_id"], name="run_id_unique"),
            models.CheckConstraint(condition=models.Q(run_id__regex=BOUND_ID_PATTERN), name="run_id_bound"),
            models.CheckConstraint(condition=models.Q(status__in=RunStatus.values), name="run_status_known"),
            models.CheckConstraint(condition=models.Q(transport__in=RunTransport.values), name="run_transport_known"),
            models.CheckConstraint(
                condition=~models.Q(status__in=sorted(TERMINAL_STATUSES)) | models.Q(completed_at__isnull=False),
                name="run_terminal_has_completed_at",
            ),
        ]

    def __str__(self) -> str:
        return self.run_id

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


# How many tally rows each tenant's count is spread over (RunTally.shard).
RUN_TALLY_SHARDS = 64


def run_tally_column(status: str) -> str:
    """The RunTally field that counts a tenant's runs in `status` (`waiting-input` -> `waiting_input`)."""
    return status.replace("-", "_")


class RunTally(TenantOwnedModel):
    """How many runs a tenant has, exactly, in all and per status: A2A ListTasks' / listRuns'
    `totalSize`, unfiltered or filtered by status, without a COUNT over the tenant's rows
    (bench/README.md §ListTasks scaling). The sum of a tenant's rows is its count; the sum of a
    status column over them, its count of runs in that status.

    On PostgreSQL, triggers on `runs_run` keep it (migrations 0006, 0007): every INSERT and DELETE
    of runs (statement triggers reading their transition tables) and every change of a run's status
    (a row trigger, fired only when `status` changes), whatever path issues it (services, cascades,
    admin, bulk SQL), adds its counts in the same transaction, so the sums are exact for every
    snapshot. A transaction adds to the row of its backend's shard (`pg_backend_pid() %
    RUN_TALLY_SHARDS`): concurrent run writes in one tenant rarely queue on one row lock, and a
    transaction only ever takes one tally row lock per tenant (all of a shard's counts are columns
    of its one row), so tally updates cannot deadlock with each other.
    """

    # No FK constraint: a tenant's deletion cascades to its runs and its tallies in an order Django
    # picks, and a run deleted after the tally rows went re-adds a (negative) row, which must not
    # block the tenant's deletion. No index of its own: the unique (tenant, shard) is the index.
    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, db_constraint=False, db_index=False, related_name="+"
    )
    shard = models.PositiveSmallIntegerField()
    runs = models.BigIntegerField(default=0, help_text="Runs added minus runs deleted through this shard.")
    # One column per RunStatus (run_tally_column): runs that entered the status minus runs that left
    # it. A database default too, so a trigger that names only some columns inserts zeros for the rest.
    pending = models.BigIntegerField(default=0, db_default=0)
    running = models.BigIntegerField(default=0, db_default=0)
    waiting_approval = models.BigIntegerField(default=0, db_default=0)
    waiting_input = models.BigIntegerField(default=0, db_default=0)
    waiting_external = models.BigIntegerField(default=0, db_default=0)
    cancelling = models.BigIntegerField(default=0, db_default=0)
    completed = models.BigIntegerField(default=0, db_default=0)
    failed = models.BigIntegerField(default=0, db_default=0)
    cancelled = models.BigIntegerField(default=0, db_default=0)

    class Meta(TenantOwnedModel.Meta):
        constraints = [models.UniqueConstraint(fields=["tenant", "shard"], name="run_tally_shard_unique")]

    def __str__(self) -> str:
        return f"{self.tenant_id}#{self.shard}: {self.runs}"


class RunEvent(TenantOwnedModel):
    """One entry of a run's log. Append-only: the code has no update or delete path, and on
    PostgreSQL a trigger refuses both (migration 0002)."""

    # Indexed by `run_event_sequence_unique` (run, sequence); the id is unique by a constraint (no
    # pattern-ops twin): a run's events are the most written rows of the host.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events", db_index=False)
    sequence = models.PositiveIntegerField()
    event_id = models.CharField(max_length=128)
    type = models.CharField(max_length=100)
    payload = models.JSONField(default=dict)
    node_id = models.CharField(max_length=128, blank=True, default="")
    at = models.DateTimeField()

    class Meta(TenantOwnedModel.Meta):
        ordering = ["run", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["run", "sequence"], name="run_event_sequence_unique"),
            models.UniqueConstraint(fields=["event_id"], name="run_event_id_unique"),
            models.CheckConstraint(condition=models.Q(sequence__gte=1), name="run_event_sequence_from_one"),
        ]
        indexes = [
            # MCP resources/list and completion (apps/mcp/resources.py): a tenant's artifacts,
            # newest first, without walking the rest of its log.
            models.Index(
                fields=["tenant", "id"],
                name="run_event_artifacts",
                condition=models.Q(type="artifact.created"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.sequence} {self.type}"


class InterruptKind(models.TextChoices):
    APPROVAL = "approval"
    CLARIFICATION = "clarification"
    CREDENTIAL = "credential"
    EXTERNAL_EVENT = "external-event"


class Interrupt(TenantOwnedModel):
    """A run waiting on something outside itself (interrupt.md). Resolved at most once."""

    interrupt_id = models.CharField(max_length=260, unique=True, help_text="Tenant-bound `<tenant>/<opaque>`.")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="interrupts")
    node_id = models.CharField(max_length=128)
    kind = models.CharField(max_length=20, choices=InterruptKind.choices)
    payload = models.JSONField(help_text="InterruptPayload {kind, key, data, resumeSchema?}.")
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution = models.JSONField(null=True, blank=True, help_text="The resumeValue it was resolved with.")

    class Meta(TenantOwnedModel.Meta):
        ordering = ["created_at"]
        constraints = [
            # interrupt.md: a key is invoked at most once per run; our key is the node id.
            models.UniqueConstraint(fields=["run", "node_id"], name="interrupt_once_per_node"),
            models.CheckConstraint(condition=models.Q(interrupt_id__regex=BOUND_ID_PATTERN), name="interrupt_id_bound"),
            models.CheckConstraint(condition=models.Q(kind__in=InterruptKind.values), name="interrupt_kind_known"),
        ]

    def __str__(self) -> str:
        return self.interrupt_id


class IdempotencyState(models.TextChoices):
    IN_FLIGHT = "in-flight"
    COMPLETED = "completed"


class IdempotencyRecord(TenantOwnedModel):
    """`Idempotency-Key` bookkeeping: (tenant, endpoint, key) -> the first response, for 24 h."""

    endpoint = models.CharField(max_length=400, help_text="The operation and its path, e.g. `POST /runs`.")
    key = models.CharField(max_length=255)
    request_digest = models.CharField(max_length=64)
    state = models.CharField(max_length=12, choices=IdempotencyState.choices, default=IdempotencyState.IN_FLIGHT)
    claim_token = models.CharField(max_length=64)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta(TenantOwnedModel.Meta):
        constraints = [
            models.UniqueConstraint(fields=["tenant", "endpoint", "key"], name="idempotency_key_unique"),
            models.CheckConstraint(
                condition=models.Q(state__in=IdempotencyState.values), name="idempotency_state_known"
            ),
        ]
        indexes = [models.Index(fields=["expires_at"], name="idempotency_expiry")]

    def __str__(self) -> str:
        return f"{self.endpoint}:{self.key}"
