"""Host events (RFC 0236): events that belong to no run, each owned by one Subject of one tenant.

Each (tenant, subject) pair is one stream whose `sequence` runs 1, 2, 3... without gaps; the
sequence orders the stream and positions a subscriber, while the wire names an event only by its
opaque `eventId` (a host event carries no `sequence`, host-event.schema.json). The table is an audit
log: rows are inserted and never changed (STYLE.md habit 6; on PostgreSQL a trigger refuses UPDATE
and DELETE, migration 0002), each linked into its stream's hash chain (apps/audit/chain.py). The
table is partitioned by time (migration 0010, apps/audit/partitions.py): records expire by whole
partitions.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.db import models

from apps.audit.host_event_types import TYPE_PATTERN, Delivery
from apps.tenants.models import Tenant, TenantOwnedModel

EVENT_ID_PATTERN = r"^[A-Za-z0-9._~-]{16,128}$"  # ids.schema.json#/$defs/eventId
GENESIS = "0" * 64  # the `prev_digest` of a stream's first record (apps/audit/chain.py)


class AppendOnlyViolation(RuntimeError):
    """Raised when code tries to change or delete an audit row."""


class HostEvent(TenantOwnedModel):
    # PROTECT, not the base's CASCADE: deleting a tenant must not silently erase its audit trail
    # (and on PostgreSQL the trigger would refuse the cascaded DELETE anyway, less readably).
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    subject_id = models.CharField(max_length=255, help_text="The owner's Subject subjectId.")
    subject = models.JSONField(help_text="The owner's whole Subject as it was when the event was written.")
    # Unique with `at` (a partitioned table's unique keys include its partition key, migration
    # 0010); event ids carry 156 random bits (mint_opaque), so they are unique per host all the same.
    event_id = models.CharField(max_length=128, help_text="Opaque, host-minted, unique per host.")
    type = models.CharField(max_length=128)
    payload = models.JSONField(default=dict)
    durable = models.BooleanField(help_text="Delivery class: durable (resumable) or ephemeral (live only).")
    sequence = models.PositiveBigIntegerField(help_text="Position in the (tenant, subject) stream, from 1.")
    at = models.DateTimeField(help_text="When the host produced the event.")
    # The hash chain (apps/audit/chain.py), hex SHA-256, written by the append statement. "" on a
    # record a writer that does not chain inserted (a release before the chain, during a rolling
    # upgrade): the chainer fills both in, once (apps/audit/chainer.py); nothing else may change them.
    prev_digest = models.CharField(max_length=64, db_default="", help_text="The predecessor's digest.")
    digest = models.CharField(max_length=64, db_default="", help_text="SHA-256 chaining this record.")

    class Meta(TenantOwnedModel.Meta):
        ordering = ["tenant_id", "subject_id", "sequence"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "subject_id", "sequence", "at"], name="hostevent_stream_sequence"
            ),
            models.UniqueConstraint(fields=["event_id", "at"], name="hostevent_event_id_at"),
            models.CheckConstraint(condition=models.Q(sequence__gte=1), name="hostevent_sequence_from_1"),
            models.CheckConstraint(condition=models.Q(event_id__regex=EVENT_ID_PATTERN), name="hostevent_event_id"),
            models.CheckConstraint(condition=models.Q(type__regex=TYPE_PATTERN), name="hostevent_type"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.subject_id}#{self.sequence} {self.type}"

    @property
    def delivery(self) -> Delivery:
        return Delivery.DURABLE if self.durable else Delivery.EPHEMERAL

    def as_wire(self) -> dict[str, Any]:
        """The host-event envelope (host-event.schema.json): closed, no runId, no sequence."""
        return {
            "eventId": self.event_id,
            "type": self.type,
            "timestamp": self.at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "delivery": str(self.delivery),
            "payload": self.payload,
        }

    # No update or delete path in code: these guard against a stray save()/delete() on a loaded row.
    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnlyViolation("host events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnlyViolation("host events are append-only")


class HostEventStream(TenantOwnedModel):
    """The counter of one (tenant, subject) stream. Appends lock its row, so sequences are allocated
    one transaction at a time and commit in sequence order: a reader never sees n+1 before n."""

    subject_id = models.CharField(max_length=255)
    last_sequence = models.PositiveBigIntegerField(default=0)
    last_digest = models.CharField(
        max_length=64, db_default=GENESIS, help_text="The chain's head: the last record's digest."
    )
    # Where the stream's kept records start once older ones expired (apps/audit/partitions.py): the
    # last expired sequence and its digest, which the first kept record's prev_digest must equal.
    expired_through = models.PositiveBigIntegerField(db_default=0)
    expired_digest = models.CharField(max_length=64, db_default=GENESIS)
    # How far the chain reaches (apps/audit/chainer.py): `last_digest` is the digest of this record.
    # Records after it were written by a writer that does not chain (a release before the chain,
    # during a rolling upgrade) and wait for the chainer. Empty: the head is `last_sequence` (or 0
    # while `last_digest` is still GENESIS), as every stream written before the column was.
    chained_through = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta(TenantOwnedModel.Meta):
        constraints = [models.UniqueConstraint(fields=["tenant", "subject_id"], name="hosteventstream_one_per_subject")]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.subject_id} @{self.last_sequence}"


class NegotiationDailyCount(TenantOwnedModel):
    """Daily rollup of `negotiation.decided` records for the auditors' charts (issue 19).

    One row per (day, tenant, protocol, outcome class, requested version) with its count, kept by
    database triggers as records are inserted into `audit_hostevent` and `runs_runevent`
    (migration 0004), so every writer (the ORM, a group-commit writer's raw multi-row INSERT) keeps
    it current and the charts never scan the record tables. `outcome` is the class the auditor page
    shows (`negotiations.outcome_class`); `requested` is "" when the peer named no version. Days
    are UTC. Not an audit row itself: only the triggers write it.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    day = models.DateField()
    protocol = models.CharField(max_length=32)
    outcome = models.CharField(max_length=16)
    requested = models.CharField(max_length=64, blank=True, default="")
    count = models.PositiveBigIntegerField(default=0)

    class Meta(TenantOwnedModel.Meta):
        constraints = [
            models.UniqueConstraint(
                fields=["day", "tenant", "protocol", "outcome", "requested"], name="negotiationdaily_one_row_per_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.tenant_id} {self.protocol} {self.outcome} {self.requested or '-'}: {self.count}"


class NegotiationPeerDaily(TenantOwnedModel):
    """Daily rollup of `negotiation.decided` records per peer, for the deprecation view (issue 24).

    One row per (UTC day, tenant, protocol, requested version, peer digest) with the number of
    exchanges and how many of them were accepted (a downgrade is accepted too), kept by database
    triggers on both homes of the record (migration 0007) like `NegotiationDailyCount`. It exists
    so distinct peers and tenants over a window are counted from rows whose number follows
    days x tenants x versions x peers, never records. `requested` is "" when the peer named no
    version; `peer_digest` is the record's `peerDigest` ("" if it had none). Only triggers write it.
    """

    # Indexed by `negotiationpeer_tenant_day`, which leads with it.
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    day = models.DateField()
    protocol = models.CharField(max_length=32)
    requested = models.CharField(max_length=64, blank=True, default="")
    peer_digest = models.CharField(max_length=128, blank=True, default="")
    count = models.PositiveBigIntegerField(default=0)
    accepted = models.PositiveBigIntegerField(default=0, help_text="Of `count`, the exchanges accepted.")

    class Meta(TenantOwnedModel.Meta):
        constraints = [
            models.UniqueConstraint(
                fields=["day", "tenant", "protocol", "requested", "peer_digest"],
                name="negotiationpeer_one_row_per_key",
            ),
        ]
        # No index holds `count` or `accepted`: the triggers add to them for every batch of records,
        # and an update that changes no indexed column stays on its page (a HOT update, no new
        # index entries). With them included, each batch's update wrote an entry into every index.
        indexes = [
            # The view's table and drill-down: one protocol (and version) over a window of days.
            models.Index(
                fields=["protocol", "requested", "day"],
                include=["tenant", "peer_digest"],
                name="negotiationpeer_protocol_day",
            ),
            # A tenant's console notice: one tenant, one protocol, the last days.
            models.Index(
                fields=["tenant", "protocol", "day"],
                include=["requested", "peer_digest"],
                name="negotiationpeer_tenant_day",
            ),
        ]

    def __str__(self) -> str:
        peer = self.peer_digest[:12] or "-"
        return f"{self.day} {self.tenant_id} {self.protocol} {self.requested or '-'} {peer}: {self.count}"


class ArchiveExport(TenantOwnedModel):
    """One export of a tenant's records to the archive (issue 36 item 3, `apps.audit.archive`).

    What went where and what proves it: the range, the two objects' URLs, the count, the SHA-256 of
    the gzip file and each stream's first and last sequence with its chain head (the last record's
    `digest`), as the manifest says them. The files are written before the row, so a row never
    names a file that was not written. Rows are evidence that records were archived before they
    expired (`archive.exported_through`), so the table is append-only like the records (migration).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    since = models.DateTimeField(null=True, blank=True, help_text="Start (inclusive); empty: from the first record.")
    until = models.DateTimeField(help_text="End of the range (exclusive).")
    file_url = models.CharField(max_length=1024, help_text="The gzip'd JSON Lines object.")
    manifest_url = models.CharField(max_length=1024)
    count = models.PositiveBigIntegerField()
    size = models.PositiveBigIntegerField(help_text="Bytes of the gzip file.")
    sha256 = models.CharField(max_length=64, help_text="Hex SHA-256 of the gzip file's bytes.")
    streams = models.JSONField(default=list, help_text="Per stream: subjectId, count, first/last sequence, head.")
    exported_at = models.DateTimeField()

    class Meta(TenantOwnedModel.Meta):
        ordering = ["-exported_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(since__isnull=True) | models.Q(since__lt=models.F("until")),
                name="archiveexport_since_before_until",
            ),
            models.CheckConstraint(condition=models.Q(sha256__regex=r"^[0-9a-f]{64}$"), name="archiveexport_sha256"),
        ]

    def __str__(self) -> str:
        since = self.since.isoformat() if self.since else "start"
        return f"{self.tenant_id} [{since}, {self.until.isoformat()}): {self.count} records"
