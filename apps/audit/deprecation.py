"""Reads for the deprecation view (issue 24): who still asks for which version, and who a floor would break.

Every read here comes from `NegotiationPeerDaily`, the per-peer daily rollup the database's
triggers keep as `negotiation.decided` records are inserted (audit migration 0007); none scans
the record tables, so the cost follows days x tenants x versions x peers, not records.

Counting rules:
- An exchange is one record. `requested` is the version the peer named, "" when it named none.
- Distinct peers are distinct `peerDigest` values (a record without one is not a peer); the same
  peer seen by two tenants is one peer in a host-wide count.
- Days are UTC dates, windows inclusive at both ends. "The last n days" is today and the n - 1
  days before it.
- "Below a floor" compares with `apps.core.protocol_versions.version_key`. A requested value outside the
  protocol's grammar cannot be compared and is never below a floor (the host refuses it already
  as unsupported). An exchange that named no version ("") is served the preferred version, and a
  floor can never be above the preferred version (facet and policy validation), so no floor would
  refuse it: it is never counted as below one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any, TypeVar, cast

from django.db.models import Count, Max, Min, Q, QuerySet, Sum

from apps.audit.models import NegotiationPeerDaily
from apps.core.protocol_versions import PROTOCOLS, Protocol, is_valid_version, version_key

_A_PEER = ~Q(peer_digest="")


@dataclass(frozen=True, slots=True)
class Window:
    since: dt.date
    until: dt.date  # inclusive

    @classmethod
    def last_days(cls, days: int, *, today: dt.date | None = None) -> Window:
        if days < 1:
            raise ValueError("days must be at least 1")
        end = today or dt.datetime.now(dt.UTC).date()
        return cls(since=end - dt.timedelta(days=days - 1), until=end)


@dataclass(frozen=True, slots=True)
class VersionRow:
    """One (protocol, requested version) over a window."""

    protocol: str
    requested: str
    exchanges: int
    accepted: int
    tenants: int
    peers: int
    first_seen: dt.date
    last_seen: dt.date

    @property
    def refused(self) -> int:
        return self.exchanges - self.accepted


@dataclass(frozen=True, slots=True)
class TenantRow:
    """One tenant's exchanges at one (protocol, requested version)."""

    tenant: str
    exchanges: int
    accepted: int
    peers: int
    first_seen: dt.date
    last_seen: dt.date


@dataclass(frozen=True, slots=True)
class PeerRow:
    """One peer's exchanges at one (protocol, requested version), across tenants."""

    peer_digest: str
    tenants: int
    exchanges: int
    accepted: int
    first_seen: dt.date
    last_seen: dt.date


@dataclass(frozen=True, slots=True)
class VersionUsage:
    """A requested version below a floor, as the console's notice shows it (apps/facets)."""

    requested: str
    exchanges: int
    tenants: int
    peers: int
    first_seen: dt.date
    last_seen: dt.date


@dataclass(frozen=True, slots=True)
class WhatIf:
    """What a floor would have refused over a window: every exchange whose requested version is
    below it, whatever its outcome then; `accepted` of them were accepted (the new breakage)."""

    protocol: str
    floor: str
    window: Window
    versions: tuple[str, ...]  # the requested versions below the floor that were seen
    exchanges: int
    accepted: int
    tenants: int
    peers: int


def _protocol(value: str) -> Protocol:
    if value not in PROTOCOLS:
        raise ValueError(f"{value!r} is not a protocol ({', '.join(PROTOCOLS)})")
    return cast(Protocol, value)


def _rows(*, window: Window, protocol: str | None = None, tenant_slug: str | None = None) -> QuerySet[Any]:
    rows = NegotiationPeerDaily.unscoped_all_tenants.filter(day__gte=window.since, day__lte=window.until)
    if protocol:
        rows = rows.filter(protocol=protocol)
    if tenant_slug:
        rows = rows.filter(tenant__slug=tenant_slug)
    return rows


def _order_key(protocol: str, requested: str) -> tuple[str, int, tuple[int, ...], str]:
    """Protocol, then newest version first; "" (no version named) and unparseable values last."""
    if protocol in PROTOCOLS and is_valid_version(cast(Protocol, protocol), requested):
        key = version_key(cast(Protocol, protocol), requested)
        return protocol, 0, tuple(-part for part in key), requested
    return protocol, 1 if requested else 2, (), requested


_TENANTS = Count("tenant", distinct=True)
_PEERS = Count("peer_digest", distinct=True, filter=_A_PEER)
_AS_FIELD = {"tenant__slug": "tenant", "accepted_n": "accepted"}  # annotations may not reuse a field's name
_Row = TypeVar("_Row", VersionRow, TenantRow, PeerRow, VersionUsage)


def _grouped(
    row: type[_Row], rows: QuerySet[Any], *group: str, order: tuple[str, ...] = (), limit: int | None = None,
    **distinct: Any,
) -> list[_Row]:  # fmt: skip
    """`rows` grouped by `group`, one `row` each: exchanges (and how many accepted), first and last
    day seen, plus the distinct counts named. One grouped query over the rollup; with `limit`, the
    first `limit` groups in `order`."""
    grouped = (
        rows.values(*group)
        .annotate(
            exchanges=Sum("count"), accepted_n=Sum("accepted"), first_seen=Min("day"), last_seen=Max("day"), **distinct
        )
        .order_by(*order)
    )
    if limit is not None:
        grouped = grouped[:limit]
    wanted = {f.name for f in fields(row)}
    return [row(**{_AS_FIELD.get(k, k): v for k, v in g.items() if _AS_FIELD.get(k, k) in wanted}) for g in grouped]


def version_table(*, window: Window, protocol: str | None = None) -> list[VersionRow]:
    """Per (protocol, requested version) over `window`: exchanges (and how many accepted),
    distinct tenants and peers, first and last day seen."""
    rows = _rows(window=window, protocol=protocol)
    table = _grouped(VersionRow, rows, "protocol", "requested", tenants=_TENANTS, peers=_PEERS)
    return sorted(table, key=lambda r: _order_key(r.protocol, r.requested))


def version_tenants(*, window: Window, protocol: str, requested: str) -> list[TenantRow]:
    """The tenants that saw `requested` of `protocol` in `window`, most exchanges first."""
    rows = _rows(window=window, protocol=protocol).filter(requested=requested)
    return sorted(_grouped(TenantRow, rows, "tenant__slug", peers=_PEERS), key=lambda r: (-r.exchanges, r.tenant))


def version_peers(*, window: Window, protocol: str, requested: str) -> list[PeerRow]:
    """The peers that asked for `requested` of `protocol` in `window` (by digest), most exchanges
    first. Records without a peer digest are left out."""
    rows = _rows(window=window, protocol=protocol).filter(_A_PEER, requested=requested)
    peers = _grouped(PeerRow, rows, "peer_digest", tenants=_TENANTS)
    return sorted(peers, key=lambda r: (-r.exchanges, r.peer_digest))


def _versions_below(protocol: Protocol, floor: str, seen: Iterable[str]) -> list[str]:
    """The requested values of `seen` below `floor` (module docstring: "" and unparseable never are)."""
    bound = version_key(protocol, floor)
    return sorted(
        (v for v in set(seen) if is_valid_version(protocol, v) and version_key(protocol, v) < bound),
        key=lambda v: version_key(protocol, v),
    )


def what_if(
    *, protocol: str, floor: str, window: Window | None = None, days: int = 30, today: dt.date | None = None
) -> WhatIf:
    """What `floor` for `protocol` would have refused over `window` (default: the last `days`
    days), host-wide: the exchanges whose requested version is below it (whatever their outcome
    then), their distinct tenants and peers, and how many of them were accepted. Raises ValueError
    for a protocol or floor outside the grammar."""
    checked = _protocol(protocol)
    version_key(checked, floor)  # raises for a floor outside the grammar
    window = window or Window.last_days(days, today=today)
    rows = _rows(window=window, protocol=checked)
    versions = _versions_below(checked, floor, rows.values_list("requested", flat=True).distinct().order_by())
    totals = rows.filter(requested__in=versions).aggregate(
        exchanges=Sum("count"), accepted_n=Sum("accepted"), tenants=_TENANTS, peers=_PEERS
    )
    return WhatIf(
        protocol=checked,
        floor=floor,
        window=window,
        versions=tuple(versions),
        exchanges=totals["exchanges"] or 0,
        accepted=totals["accepted_n"] or 0,
        tenants=totals["tenants"],
        peers=totals["peers"],
    )


@dataclass(frozen=True, slots=True)
class WhoWouldBreak:
    """The tenants and peers behind a what-if (bounded lists; the counts are the whole)."""

    tenants: list[TenantRow]
    peers: list[PeerRow]
    tenant_count: int
    peer_count: int


def what_if_who(*, outcome: WhatIf, limit: int = 20) -> WhoWouldBreak:
    """Who a what-if's floor would refuse: the tenants and the peers (by digest) whose exchanges
    requested a version below it over its window, those with the most exchanges it would newly
    break (then the most exchanges) first, at most `limit` of each. Two grouped queries over the
    rollup, sliced in the database."""
    if not outcome.versions:
        return WhoWouldBreak(tenants=[], peers=[], tenant_count=0, peer_count=0)
    rows = _rows(window=outcome.window, protocol=outcome.protocol).filter(requested__in=outcome.versions)
    order = ("-accepted_n", "-exchanges")
    tenants = _grouped(TenantRow, rows, "tenant__slug", order=(*order, "tenant__slug"), limit=limit, peers=_PEERS)
    peers = _grouped(
        PeerRow, rows.filter(_A_PEER), "peer_digest", order=(*order, "peer_digest"), limit=limit, tenants=_TENANTS
    )
    return WhoWouldBreak(tenants=tenants, peers=peers, tenant_count=outcome.tenants, peer_count=outcome.peers)


def version_usage(*, protocol: str, tenant_slug: str | None, versions_below: str, days: int = 30) -> list[VersionUsage]:
    """The requested versions of `protocol` strictly below `versions_below` seen over the last
    `days` days (UTC, today included), for one tenant or (None) all: per version, exchanges,
    distinct tenants and peers, first and last day seen; oldest version first. Empty and
    unparseable requested values are skipped (module docstring). Raises ValueError for a protocol
    or `versions_below` outside the grammar."""
    checked = _protocol(protocol)
    version_key(checked, versions_below)
    rows = _rows(window=Window.last_days(days), protocol=checked, tenant_slug=tenant_slug)
    versions = _versions_below(checked, versions_below, rows.values_list("requested", flat=True).distinct().order_by())
    if not versions:
        return []
    usage = _grouped(VersionUsage, rows.filter(requested__in=versions), "requested", tenants=_TENANTS, peers=_PEERS)
    return sorted(usage, key=lambda u: version_key(checked, u.requested))
