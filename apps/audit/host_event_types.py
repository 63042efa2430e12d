"""The registry of host-event types and the delivery class each is always sent as (RFC 0236 §A).

One dict for the whole host. Apps register their types in `AppConfig.ready()`;
`host_event_append` refuses an unregistered type and an event whose class differs from the
registered one, so the `delivery` on the wire always equals what `hostEvents.types[]` advertises
(host-event.schema.json: "`delivery` MUST equal the class the host advertises for `type`").
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from apps.audit.errors import UnregisteredHostEventType

# host-event.schema.json `type`: a protocol type `domain.verb-ed` or a vendor `org.name`.
TYPE_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*\.[a-z][a-z0-9]*(-[a-z0-9]+)*$"  # also the table's CHECK

# interop.md §The audit event: a runless negotiation is recorded as the caller's durable host event.
NEGOTIATION_DECIDED = "negotiation.decided"

# An operator re-anchored the stream's hash chain (`audit_verify --reanchor`, apps/audit/chainer.py):
# a record in the stream itself, which the verifier reports ever after. This host's own type.
CHAIN_REANCHORED = "openwop-host.chain-reanchored"


class Delivery(enum.StrEnum):
    DURABLE = "durable"  # stored, resumable by eventId, webhook-deliverable
    EPHEMERAL = "ephemeral"  # live subscribers only: never replayed, never fanned out


# RFC 0241 §A: the reserved test types, one per class, emitted only by `POST /host/events/test`.
HOST_TEST_TYPES: dict[Delivery, str] = {
    Delivery.DURABLE: "host-test.durable-triggered",
    Delivery.EPHEMERAL: "host-test.ephemeral-triggered",
}


def _always() -> bool:
    return True


def conformance_seams_enabled() -> bool:
    return bool(settings.OPENWOP_CONFORMANCE_SEAMS)


@dataclass(frozen=True, slots=True)
class HostEventType:
    type: str
    delivery: Delivery
    # Whether discovery lists the type right now. Listing a host-test type is what binds
    # `POST /host/events/test` (RFC 0241 §B.1), so those follow the switch that serves it.
    advertised: Callable[[], bool] = _always

    @property
    def durable(self) -> bool:
        return self.delivery is Delivery.DURABLE


_registry: dict[str, HostEventType] = {}


def register_host_event_type(
    type_name: str, *, delivery: Delivery, advertised: Callable[[], bool] | None = None
) -> HostEventType:
    """Register a type once; registering it again with the same class is a no-op (ready() may rerun)."""
    if not re.match(TYPE_PATTERN, type_name):
        raise ValueError(f"{type_name!r} is not a host-event type (domain.verb-ed or org.name)")
    existing = _registry.get(type_name)
    if existing is not None:
        if existing.delivery is not delivery:
            raise ValueError(f"{type_name!r} is already registered as {existing.delivery}")
        return existing
    entry = HostEventType(type=type_name, delivery=delivery, advertised=advertised or _always)
    _registry[type_name] = entry
    return entry


def host_event_type(type_name: str) -> HostEventType:
    try:
        return _registry[type_name]
    except KeyError:
        raise UnregisteredHostEventType(f"{type_name!r} is not a registered host-event type") from None


def advertised_host_event_types() -> list[HostEventType]:
    """The types `hostEvents.types[]` lists now, in a stable order (discovery bytes feed the ETag)."""
    return [entry for name, entry in sorted(_registry.items()) if entry.advertised()]
