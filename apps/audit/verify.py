"""`audit_verify`: prove the records' hash chain (apps/audit/chain.py), and say what it could prove
from outside the database.

Inside the database, each (tenant, subject) stream is walked in sequence order and every link
recomputed, from the stream's expiry anchor (`expired_through`, `expired_digest`: the last expired
record) to its head (`last_sequence`, `last_digest`). Findings, each naming the first sequence it
concerns:

- "altered": a record's digest is not the link of its predecessor's digest, its sequence and its
  content, or its predecessor's digest is not the one it names, or an export's head disagrees.
- "missing": a sequence is absent (removed, or the counter was moved past it).
- "below the expiry anchor": a record at or below the anchor is still there. Expiry removes a
  stream's records strictly from the front (apps/audit/partitions.py), so none ever is; one that
  is means the anchor was moved over records that were kept.
- records past the stream's chained head (`chained_head`) are "not yet chained": written without
  digests by a writer that does not chain, waiting for the chainer. They are counted, not proved.
- a re-anchor record (`CHAIN_REANCHORED`, an operator's `audit_verify --reanchor`) starts the chain
  again from itself: it is reported ever after, and it accepts the findings from the break it
  names (`brokenAt`) up to itself; any finding before that break or after the record still fails.

Outside the database: with an archive (OPENWOP_ARCHIVE_URL, or `--against`), the manifests are
read from the archive itself, not from the `ArchiveExport` rows. Each manifest's chain heads must
equal the digests of the records they name (or the anchor, when that record expired), the archive
may hold no record the database has lost, and each stream's expiry anchor must be pinned by the
archive: the archived record at the anchor has its digest, or the one after it names it as its
predecessor. A stream the archive holds anything of is "checked outside the database"; the rest
(never exported, or no archive) are proved "only inside", and the report says which.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from apps.audit.archive import ArchivedStream, archive_manifest_streams, archive_record_links
from apps.audit.chain import chained_head, content_hash, link
from apps.audit.host_event_types import CHAIN_REANCHORED
from apps.audit.models import ArchiveExport, HostEvent, HostEventStream
from apps.tenants.models import Tenant

ALTERED = "altered"
MISSING = "missing"
BELOW_ANCHOR = "below the expiry anchor"
ANCHOR_NOT_ARCHIVED = "expiry anchor not pinned by the archive"
LISTED = 20  # streams named one by one in the inside-only line; the rest are counted


def printable(text: str) -> str:
    """`text` for a terminal or a log line: control and other unprintable characters escaped."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """A finding: the first sequence of one stream that a check does not prove."""

    tenant: str
    subject_id: str
    sequence: int
    problem: str

    def __str__(self) -> str:
        return f"{self.tenant} {printable(self.subject_id)}: sequence {self.sequence} {self.problem}"


@dataclass(frozen=True, slots=True)
class Reanchor:
    """An operator's re-anchor record, as verify reports it."""

    tenant: str
    subject_id: str
    sequence: int
    at: datetime
    actor: str
    reason: str
    broken_at: int | None  # the first break it accepts (its payload's `brokenAt`)
    accepted: tuple[ChainBreak, ...] = ()  # the findings it accepts in this run

    def __str__(self) -> str:
        line = (
            f"{self.tenant} {printable(self.subject_id)}: re-anchored at sequence {self.sequence}"
            f" on {self.at.date().isoformat()} by {printable(self.actor)}: {printable(self.reason)}"
        )
        if self.accepted:
            line += " (accepting: " + "; ".join(f"sequence {b.sequence} {b.problem}" for b in self.accepted) + ")"
        return line


@dataclass(frozen=True, slots=True)
class Pending:
    """A stream's records past its chained head, waiting for the chainer."""

    tenant: str
    subject_id: str
    first: int
    count: int

    def __str__(self) -> str:
        return (
            f"{self.tenant} {printable(self.subject_id)}: {self.count} records from sequence {self.first}"
            " not yet chained"
        )


@dataclass(slots=True)
class ChainReport:
    records: int = 0
    streams: int = 0
    breaks: list[ChainBreak] = field(default_factory=list)
    reanchors: list[Reanchor] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    archive: str = ""  # the archive checked against ("" when none)
    outside: list[str] = field(default_factory=list)  # streams checked against the archive too
    inside: list[str] = field(default_factory=list)  # streams proved only inside the database

    @property
    def intact(self) -> bool:
        return not self.breaks

    @property
    def broken_streams(self) -> int:
        return len({(b.tenant, b.subject_id) for b in self.breaks})

    def evidence_lines(self) -> list[str]:
        """Which streams were checked outside the database, which only inside."""
        if not self.archive:
            return [f"only inside the database: all {len(self.inside)} streams (no archive configured or given)"]
        lines = [f"checked against the archive {printable(self.archive)}: {len(self.outside)} streams"]
        if self.inside:
            more = len(self.inside) - LISTED
            named = ", ".join(self.inside[:LISTED]) + (f" and {more} more" if more > 0 else "")
            lines.append(f"only inside the database (nothing of them archived): {len(self.inside)} streams: {named}")
        return lines


@dataclass
class _Walk:
    """One stream being walked: where it starts (after its expired records) and how far it is proved."""

    tenant: str
    subject_id: str
    anchor: int  # the last expired sequence: no record at or below it may remain
    prev: str  # the digest the next sequence must link to
    head: int  # the chained head: records after it wait for the chainer
    expected: int = 0  # the next sequence the chain must hold
    broken: ChainBreak | None = None  # the current segment's first break
    findings: list[ChainBreak] = field(default_factory=list)
    reanchors: list[Reanchor] = field(default_factory=list)
    below: bool = False
    crossed: bool = False  # the walk has passed the chained head
    pending_first: int = 0
    pending: int = 0
    last_digest: str = ""  # the stream's: the digest of the chained head

    def __post_init__(self) -> None:
        self.expected = self.anchor + 1

    def fail(self, sequence: int, problem: str) -> None:
        if self.broken is None:
            self.broken = ChainBreak(self.tenant, self.subject_id, sequence, problem)

    def _link_checks(self, sequence: int, prev_digest: str) -> None:
        if sequence != self.expected:
            self.fail(self.expected, MISSING if sequence > self.expected else ALTERED)
        elif prev_digest != self.prev:
            # The record does not link to the one before: that one was rewritten (digest included),
            # or this one's link was; the first of the two is the first sequence no longer proved.
            self.fail(sequence - 1 if sequence > self.anchor + 1 else sequence, ALTERED)

    def step(
        self, sequence: int, type_: str, prev_digest: str, digest: str, content: str, exported: set[str],
        at: datetime, payload: dict[str, Any],
    ) -> None:  # fmt: skip
        if sequence <= self.anchor:
            if not self.below:
                self.below = True
                self.findings.append(ChainBreak(self.tenant, self.subject_id, sequence, BELOW_ANCHOR))
            return
        if sequence > self.head:
            self._unchained(sequence, prev_digest, digest)
            return
        if type_ == CHAIN_REANCHORED:
            self._link_checks(sequence, prev_digest)  # what the old segment's end says
            self._end_segment()
            self.reanchors.append(_reanchor_of(self.tenant, self.subject_id, sequence, at, payload))
            if link(prev_digest, sequence, content) != digest or not exported <= {digest}:
                self.fail(sequence, ALTERED)
        else:
            self._link_checks(sequence, prev_digest)
            if link(prev_digest, sequence, content) != digest or not exported <= {digest}:
                self.fail(sequence, ALTERED)
        self.expected, self.prev = sequence + 1, digest

    def _unchained(self, sequence: int, prev_digest: str, digest: str) -> None:
        if not self.crossed:
            self.crossed = True
            self._at_head()
        if sequence != self.expected:
            self.fail(self.expected, MISSING if sequence > self.expected else ALTERED)
        elif prev_digest or digest:  # digests past the head: nothing but a hand on the table writes those
            self.fail(sequence, ALTERED)
        elif not self.pending:
            self.pending_first = sequence
        self.pending += 1
        self.expected = sequence + 1

    def _at_head(self) -> None:
        """The chained part ends at the head: its digest is the stream's `last_digest`."""
        if self.expected <= self.head:
            self.fail(self.expected, MISSING)
        elif self.prev != self.last_digest:
            self.fail(self.expected - 1, ALTERED)

    def _end_segment(self) -> None:
        if self.broken is not None:
            self.findings.append(self.broken)
            self.broken = None

    def finish(self, last_sequence: int) -> list[ChainBreak]:
        """The kept records end at the stream's head (its counter and last digest); the findings
        the stream's re-anchors do not accept."""
        if not self.crossed:
            self._at_head()
        if self.expected <= last_sequence:
            self.fail(self.expected, MISSING)
        self._end_segment()
        kept: list[ChainBreak] = []
        for finding in self.findings:
            accepting = next((r for r in self.reanchors if r.broken_at is not None
                              and r.broken_at <= finding.sequence < r.sequence), None)  # fmt: skip
            if accepting is None:
                kept.append(finding)
            else:
                index = self.reanchors.index(accepting)
                self.reanchors[index] = _accepting(accepting, finding)
        return kept


def _reanchor_of(tenant: str, subject_id: str, sequence: int, at: datetime, payload: dict[str, Any]) -> Reanchor:
    broken_at = payload.get("brokenAt")
    return Reanchor(
        tenant=tenant, subject_id=subject_id, sequence=sequence, at=at, actor=str(payload.get("actor", "")),
        reason=str(payload.get("reason", "")),
        broken_at=broken_at if isinstance(broken_at, int) and not isinstance(broken_at, bool) else None,
    )  # fmt: skip


def _accepting(reanchor: Reanchor, finding: ChainBreak) -> Reanchor:
    return Reanchor(
        tenant=reanchor.tenant, subject_id=reanchor.subject_id, sequence=reanchor.sequence, at=reanchor.at,
        actor=reanchor.actor, reason=reanchor.reason, broken_at=reanchor.broken_at,
        accepted=(*reanchor.accepted, finding),
    )  # fmt: skip


_Key = tuple[int, str]


def chain_verify(*, tenant: Tenant | None = None, against: str = "", chunk_size: int = 2000) -> ChainReport:
    """Walk every stream of `tenant` (every tenant if None) and recompute each link (see the module
    docstring); with `against` (an archive URL), check the anchors and heads against the archive's
    own manifests too. Reads the records once, streamed: memory follows the number of streams and
    exports, not of records. Raises ArchiveUnavailable when the archive cannot be read."""
    streams = HostEventStream.unscoped_all_tenants.select_related("tenant").order_by("tenant_id", "subject_id")
    events = HostEvent.unscoped_all_tenants.order_by("tenant_id", "subject_id", "sequence")
    if tenant is not None:
        streams, events = streams.filter(tenant=tenant), events.filter(tenant=tenant)
    heads = {(s.tenant_id, s.subject_id): s for s in streams}
    slugs = {s.tenant_id: s.tenant.slug for s in heads.values()}
    if tenant is not None:
        slugs[tenant.pk] = tenant.slug
    exported = _export_heads(tenant)
    archived: dict[_Key, list[ArchivedStream]] = {}
    if against:
        archived = _archived(against, slugs)
        for key, entries in archived.items():
            for entry in entries:
                exported[key][entry.last].add(entry.head)
    report = ChainReport(streams=len(heads), archive=against)
    walks: dict[_Key, _Walk] = {}

    def walk_of(tenant_pk: int, subject_id: str) -> _Walk:
        head = heads.get((tenant_pk, subject_id))
        slug = slugs.get(tenant_pk) or Tenant.objects.get(pk=tenant_pk).slug
        if head is None:
            return _Walk(slug, subject_id, anchor=0, prev="", head=0)
        walk = _Walk(slug, subject_id, anchor=head.expired_through, prev=head.expired_digest, head=chained_head(head))
        walk.last_digest = head.last_digest
        return walk

    columns = ["tenant_id", "subject_id", "subject", "event_id", "type", "durable", "at", "payload",
               "sequence", "prev_digest", "digest"]  # fmt: skip
    for row in events.values_list(*columns).iterator(chunk_size=chunk_size):
        tenant_pk, subject_id, subject, event_id, type_, durable, at, payload, sequence, prev_digest, digest = row
        key = (tenant_pk, subject_id)
        walk = walks.get(key) or walks.setdefault(key, walk_of(tenant_pk, subject_id))
        content = content_hash(
            tenant=walk.tenant,
            subject_id=subject_id,
            subject=subject,
            event_id=event_id,
            type=type_,
            durable=durable,
            at=at,
            payload=payload,
        )
        walk.step(sequence, type_, prev_digest, digest, content, exported[key].get(sequence, set()), at, payload)
        report.records += 1
    pinned = _anchors_pinned(heads, archived)
    for key, head in heads.items():
        walk = walks.get(key) or walk_of(*key)
        anchored = exported[key].get(head.expired_through, set())
        if head.expired_through and not anchored <= {head.expired_digest}:
            walk.findings.append(ChainBreak(walk.tenant, walk.subject_id, head.expired_through, ALTERED))
        for entry in archived.get(key, []):
            if entry.last > head.last_sequence:  # the archive holds a record the database lost
                walk.findings.append(ChainBreak(walk.tenant, walk.subject_id, head.last_sequence + 1, MISSING))
                break
        if head.expired_through and archived.get(key) and key not in pinned:
            walk.findings.append(ChainBreak(walk.tenant, walk.subject_id, head.expired_through, ANCHOR_NOT_ARCHIVED))
        report.breaks.extend(walk.finish(head.last_sequence))
        report.reanchors.extend(walk.reanchors)
        if walk.pending:
            report.pending.append(Pending(walk.tenant, walk.subject_id, walk.pending_first, walk.pending))
        name = f"{walk.tenant} {printable(walk.subject_id)}"
        (report.outside if archived.get(key) else report.inside).append(name)
    for key, walk in walks.items():
        if key not in heads:  # records of a stream whose counter is gone: nothing proves their end
            report.breaks.append(ChainBreak(walk.tenant, walk.subject_id, walk.expected, ALTERED))
    return report


def _export_heads(tenant: Tenant | None) -> defaultdict[_Key, defaultdict[int, set[str]]]:
    """(tenant pk, subject id) -> {last sequence of an export: its chain heads}, from the database's
    own export rows (evidence inside the database)."""
    exports = ArchiveExport.unscoped_all_tenants.all()
    if tenant is not None:
        exports = exports.filter(tenant=tenant)
    heads: defaultdict[_Key, defaultdict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for tenant_pk, streams in exports.values_list("tenant_id", "streams"):
        for stream in streams:
            heads[(tenant_pk, stream["subjectId"])][stream["lastSequence"]].add(stream["head"])
    return heads


def _archived(url: str, slugs: dict[int, str]) -> dict[_Key, list[ArchivedStream]]:
    """Every stream entry of every manifest the archive holds for these tenants."""
    archived: dict[_Key, list[ArchivedStream]] = defaultdict(list)
    for tenant_pk, slug in sorted(slugs.items()):
        for entry in archive_manifest_streams(url, tenant_slug=slug):
            archived[(tenant_pk, entry.subject_id)].append(entry)
    return archived


def _anchors_pinned(heads: dict[_Key, HostEventStream], archived: dict[_Key, list[ArchivedStream]]) -> set[_Key]:
    """The streams whose expiry anchor the archive holds: the record at `expired_through` with
    digest `expired_digest` (an export's head, or a record in its data file), or the record after
    it naming that digest as its predecessor. Each data file needed is read once."""
    pinned: set[_Key] = set()
    files: dict[str, tuple[ArchivedStream, set[tuple[str, int]]]] = {}
    for key, stream in heads.items():
        entries, anchor = archived.get(key, []), stream.expired_through
        if not anchor or not entries:
            continue
        if any(entry.last == anchor and entry.head == stream.expired_digest for entry in entries):
            pinned.add(key)
            continue
        for entry in entries:
            for sequence in (anchor, anchor + 1):
                if entry.first <= sequence <= entry.last:
                    files.setdefault(entry.file_url, (entry, set()))[1].add((key[1], sequence))
    links = {url: archive_record_links(entry, wanted=wanted) for url, (entry, wanted) in files.items()}
    for key, stream in heads.items():
        anchor, digest = stream.expired_through, stream.expired_digest
        for entry in archived.get(key, []) if anchor and key not in pinned else []:
            found = links.get(entry.file_url, {})
            at, after = found.get((key[1], anchor)), found.get((key[1], anchor + 1))
            if (at is not None and at[1] == digest) or (after is not None and after[0] == digest):
                pinned.add(key)
    return pinned
