"""Version negotiation for both embedded protocols: one decision, one content-free record.

interop.md §Negotiation is a protocol. The same service serves the inbound doors (A2A-Version,
MCP-Protocol-Version) and the outbound clients: the decision is a pure function of the facet, the
requested version, the peer's offers and whether the exchange is authenticated; every outcome,
refusals included, leaves exactly one `negotiation.decided` record, written in the same
transaction as the decision, on the run's log or else as the caller's durable host event.

The floor is the effective floor (apps/facets/policy.py, issue 24): the strictest of the host
facet's, the tenant's policy and, when the exchange targets an agent, the agent's. A refusal under
it is `below-floor` with that floor in the record's `floor`, exactly as under the host floor.
Which exchanges see which floor:

- MCP (HTTP and stdio, per-request and handshake-era) and every A2A operation: the caller's
  tenant floor (the Subject's tenant).
- A2A operations that resolve a `tenant: R` to an agent (SendMessage, SendStreamingMessage,
  GetExtendedAgentCard): that agent's floor too. Each binding hands R to the negotiation when an
  agent of the tenant holds a floor (apps/a2a/operations.py `agent_floor_may_apply`), so the
  exchange's one decision and record carry it.
- Outbound exchanges (apps/peers/outbound.py): the run's tenant's floor.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, Literal
from urllib.parse import urlsplit

from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone

from apps.audit.group_commit import host_event_append_batched
from apps.audit.host_event_types import NEGOTIATION_DECIDED
from apps.audit.services import host_event_append
from apps.core.async_db import statements_on_django_connection
from apps.core.errors import OpenWopError
from apps.core.metrics import negotiation_decided
from apps.core.protocol_versions import Protocol, is_valid_version, version_key
from apps.facets.models import Facet
from apps.facets.policy import TenantFloors, atenant_floors_cached, effective_floor, tenant_floors_cached
from apps.facets.services import facet_ensure
from apps.tenants.subject import Subject

NEGOTIATION_EVENT = NEGOTIATION_DECIDED  # interop.md §The audit event
Outcome = Literal["accepted", "refused"]
Reason = Literal["ok", "below-floor", "unsupported", "unauthenticated"]
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Decision:
    protocol: Protocol
    outcome: Outcome
    reason: Reason
    version: str | None
    requested: str | None
    floor: str
    preferred: str
    supported: tuple[str, ...] = field(default=())

    @property
    def accepted(self) -> bool:
        return self.outcome == "accepted"


class NegotiationRefused(OpenWopError):
    """400 interop_version_unsupported on REST-style surfaces; A2A maps it to -32009, MCP to -32022."""

    code = "interop_version_unsupported"

    def __init__(self, decision: Decision, *, run_id: str | None = None) -> None:
        details: dict[str, Any] = {
            "protocol": decision.protocol,
            "supported": list(decision.supported),
            "reason": decision.reason,
        }
        if decision.requested is not None:
            details["requested"] = decision.requested
        if run_id is not None:
            details["runId"] = run_id
        super().__init__(f"No {decision.protocol} version could be agreed ({decision.reason}).", details=details)
        self.decision = decision


@lru_cache(maxsize=4096)
def peer_origin_digest(url_or_origin: str) -> str:
    """Lowercase hex SHA-256 of the peer's origin as a WHATWG URL serialises it (scheme://host[:port]).

    A peer with no URL origin (an inbound caller that sent no `Origin`) is digested as given.
    Memoised (a pure function of its argument; bounded, as an Origin header is the caller's): every
    exchange records one, and a caller sends the same origin or Subject request after request.
    """
    parts = urlsplit(url_or_origin.strip())
    scheme = (parts.scheme or "").lower()
    host = (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not host:
        return hashlib.sha256(url_or_origin.encode("utf-8")).hexdigest()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    port = parts.port
    origin = f"{scheme}://{host}"
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        origin += f":{port}"
    return hashlib.sha256(origin.encode("utf-8")).hexdigest()


def decide(
    *,
    protocol: Protocol,
    offered: Sequence[str],
    preferred: str,
    floor: str,
    requested: str | None,
    peer_offers: Sequence[str] | None,
    authenticated: bool,
) -> Decision:
    """The decision table. `requested` is what the requester named (inbound: the peer; outbound: us);
    `peer_offers` are the peer's versions when known (outbound), else only `requested` is on offer."""

    def key(v: str) -> tuple[int, ...]:
        return version_key(protocol, v)

    def refused(reason: Reason) -> Decision:
        return Decision(protocol, "refused", reason, None, requested, floor, preferred, tuple(offered))

    candidate = requested if requested is not None else preferred
    if not is_valid_version(protocol, candidate):
        return refused("unsupported")
    if key(candidate) < key(floor):
        return refused("below-floor")
    if candidate not in offered:
        return refused("unsupported")
    if peer_offers is None:
        chosen = candidate
    else:
        peer = {v for v in peer_offers if is_valid_version(protocol, v)}
        common = sorted(
            (v for v in offered if v in peer and key(floor) <= key(v) <= key(candidate)), key=key, reverse=True
        )
        if not common:
            all_below = bool(peer) and all(key(v) < key(floor) for v in peer)
            return refused("below-floor" if all_below else "unsupported")
        chosen = common[0]
    if key(chosen) < key(preferred) and not authenticated:
        # An unauthenticated exchange never lands below preferredVersion (§Authentication).
        return refused("unauthenticated")
    return Decision(protocol, "accepted", "ok", chosen, requested, floor, preferred, tuple(offered))


def negotiation_payload(decision: Decision, *, peer_digest: str) -> dict[str, Any]:
    """The content-free record: no peer in clear, only its origin digest."""
    payload: dict[str, Any] = {
        "protocol": decision.protocol,
        "outcome": decision.outcome,
        "reason": decision.reason,
        "floor": decision.floor,
        "peerDigest": peer_digest,
        "at": timezone.now().isoformat().replace("+00:00", "Z"),
    }
    if decision.version is not None:
        payload["version"] = decision.version
    if decision.requested is not None:
        payload["requested"] = decision.requested
    return payload


def inbound_peer_origin(*, origin_header: str | None, subject: Subject | None) -> str:
    """The peer of an inbound exchange: its `Origin` when it sent a web origin, else its Subject."""
    if origin_header and urlsplit(origin_header).scheme in _DEFAULT_PORTS:
        return origin_header
    if subject is not None:
        return f"subject:{subject.issuer}#{subject.subject_id}"
    return "anonymous"


def negotiation_decide(
    *,
    protocol: Protocol,
    requested: str | None,
    peer_origin: str,
    subject: Subject | None,
    run: Any = None,
    peer_offers: Sequence[str] | None = None,
    authenticated: bool | None = None,
    facet: Facet | None = None,
    tenant: str | None = None,
    agent_pk: int | None = None,
) -> Decision:
    """Decide, and record the decision in the same transaction. Returns the decision either way;
    callers raise `NegotiationRefused(decision)` (or their protocol's error) on a refusal.

    `authenticated` defaults to "a Subject made the request" (inbound); an outbound exchange says
    whether the host presented its own outbound identity to the peer. `facet` is the protocol's
    facet row when the caller already read it in this request (it uses it for its features too);
    else it is read here. `tenant` (a slug) defaults to the Subject's: its policy's floor applies;
    `agent_pk` names the agent the exchange targets, whose floor applies too."""
    decision = negotiation_precheck(
        protocol=protocol,
        requested=requested,
        peer_offers=peer_offers,
        authenticated=subject is not None if authenticated is None else authenticated,
        facet=facet,
        tenant=tenant if tenant is not None else (subject.tenant if subject is not None else None),
        agent_pk=agent_pk,
    )
    negotiation_record(decision, peer_origin=peer_origin, subject=subject, run=run)
    return decision


def negotiation_precheck(
    *,
    protocol: Protocol,
    requested: str | None,
    peer_offers: Sequence[str] | None,
    authenticated: bool,
    facet: Facet | None = None,
    tenant: str | None = None,
    agent_pk: int | None = None,
    floors: TenantFloors | None = None,
) -> Decision:
    """The decision against the facet and the policies as they stand, recording nothing. A client
    asks this before it puts a version on the wire, so a version below the floor is never sent.
    `tenant` (slug) and `agent_pk` select the policies; `floors` are the tenant's when the caller
    already read them (the event loop's path), else they are read here from the process cache."""
    if facet is None:
        facet = facet_ensure(protocol=protocol)
    elif facet.protocol != protocol:
        raise ValueError(f"a {facet.protocol} facet cannot decide {protocol}")
    if floors is None and tenant is not None:
        floors = tenant_floors_cached(tenant_slug=tenant)
    return decide(
        protocol=protocol,
        offered=list(facet.versions),
        preferred=facet.preferred_version,
        floor=effective_floor(protocol=protocol, host_floor=facet.minimum_version, floors=floors, agent_pk=agent_pk),
        requested=requested,
        peer_offers=peer_offers,
        authenticated=authenticated,
    )


def negotiation_record(decision: Decision, *, peer_origin: str, subject: Subject | None, run: Any = None) -> None:
    """Write one `negotiation.decided` for `decision`: also how a client records a refusal the
    peer made after the version was agreed (A2A -32009, MCP -32022 on a later call)."""
    payload = negotiation_payload(decision, peer_digest=peer_origin_digest(peer_origin))
    with transaction.atomic():
        _record(subject=subject, run=run, payload=payload)
        tenant = subject.tenant if subject is not None else None
        decided = partial(negotiation_decided, decision.protocol, decision.outcome, decision.version, tenant)
        transaction.on_commit(decided)


async def negotiation_decide_deferred(
    *,
    protocol: Protocol,
    requested: str | None,
    peer_origin: str,
    subject: Subject,
    facet: Facet,
    agent_pk: int | None = None,
) -> tuple[Decision, asyncio.Future[None]]:
    """`negotiation_decide` for an authenticated inbound exchange served from the event loop
    (apps/doors): the same decision against the facet the caller read and the Subject's tenant's
    policies (the process cache: a hit awaits nothing), and its record, group-committed, as a task
    the caller MUST await before its exchange answers, whatever the answer (it may await at once,
    or let the exchange's own work overlap the commit). The record is written even if nobody
    awaits it: the group commit owns it once queued."""
    floors = await atenant_floors_cached(tenant_slug=subject.tenant)
    decision = negotiation_precheck(
        protocol=protocol,
        requested=requested,
        peer_offers=None,
        authenticated=True,
        facet=facet,
        floors=floors,
        agent_pk=agent_pk,
    )
    recorded = asyncio.ensure_future(negotiation_record_batched(decision, peer_origin=peer_origin, subject=subject))
    return decision, recorded


async def negotiation_record_batched(decision: Decision, *, peer_origin: str, subject: Subject) -> None:
    """`negotiation_record` for an inbound exchange with no run, from the event loop: the same
    record as the caller's durable host event, group-committed with concurrent exchanges'
    (apps.audit.group_commit). Returns once the record is committed, so the answer may leave.
    Where the loop's statements take Django's connection (a `db` test, a loop that lives for one
    call: apps/core/async_db.py), `negotiation_record` writes it there."""
    if statements_on_django_connection():
        await sync_to_async(negotiation_record)(decision, peer_origin=peer_origin, subject=subject)
        return
    payload = negotiation_payload(decision, peer_digest=peer_origin_digest(peer_origin))
    await host_event_append_batched(subject=subject, type=NEGOTIATION_EVENT, payload=payload)
    negotiation_decided(decision.protocol, decision.outcome, decision.version, subject.tenant)  # committed now


def _record(*, subject: Subject | None, run: Any, payload: dict[str, Any]) -> None:
    """On the run's log when there is a run, else as the caller's durable host event."""
    if run is not None:
        from apps.runs.log import event_append, run_save
        from apps.runs.models import Run

        locked = Run.unscoped_all_tenants.select_for_update().get(pk=run.pk)
        event_append(run=locked, type=NEGOTIATION_EVENT, payload=payload)
        run_save(locked)
    elif subject is not None:
        host_event_append(subject=subject, type=NEGOTIATION_EVENT, payload=payload, durable=True)
