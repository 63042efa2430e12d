"""Writes for facets: creation with defaults, operator edits (audited), registry re-evaluation."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models.base import ModelState
from django.utils import timezone

from apps.core.errors import ValidationFailed
from apps.core.invalidation import TOPIC_CARD, TOPIC_FACET, acached, cached, invalidate_on_commit
from apps.facets.models import Facet, FacetChange, FacetRefresh
from apps.facets.validation import facet_errors
from apps.facets.versions import Protocol

logger = logging.getLogger(__name__)

EDITABLE_FIELDS: dict[Protocol, tuple[str, ...]] = {
    "a2a": (
        "versions", "preferred_version", "minimum_version", "profiles", "refresh_window_days",
        "agent_card_path", "streaming", "push_notifications", "durable_tasks", "agent_cards",
    ),
    "mcp": (
        "versions", "preferred_version", "minimum_version", "profiles", "refresh_window_days",
        "features", "server_paths", "transports", "mrtr_max_rounds",
    ),
}

DEFAULTS: dict[Protocol, dict[str, Any]] = {
    "a2a": {
        "versions": ["1.0"], "preferred_version": "1.0", "minimum_version": "1.0", "profiles": ["a2a-1.0"],
        "refresh_window_days": 30, "agent_card_path": "/.well-known/agent-card.json",
        "streaming": True, "push_notifications": True, "durable_tasks": True, "agent_cards": True,
    },
    "mcp": {
        "versions": ["2026-07-28"], "preferred_version": "2026-07-28", "minimum_version": "2026-07-28",
        "profiles": ["mcp-2026-07-28"], "refresh_window_days": 30,
        "features": ["server-discover", "mrtr", "cacheable-lists", "extensions"],
        "server_paths": ["/mcp"], "transports": ["streamable-http", "stdio"], "mrtr_max_rounds": 4,
    },
}


def facet_fields(facet: Facet) -> dict[str, Any]:
    return {field: getattr(facet, field) for field in EDITABLE_FIELDS[facet.protocol]}  # type: ignore[index]


def _today() -> dt.date:
    return timezone.now().date()  # UTC: never a date in the future for any reader


def facet_ensure(*, protocol: Protocol) -> Facet:
    """The facet row, created with defaults and evaluated against the registry on first use."""
    facet = Facet.objects.filter(protocol=protocol).first()
    if facet is not None:
        return facet
    try:
        with transaction.atomic():
            facet = Facet.objects.create(protocol=protocol, **DEFAULTS[protocol])
            FacetChange.objects.create(
                protocol=protocol, actor="system:defaults", before=None, after=facet_fields(facet)
            )
    except IntegrityError:  # created concurrently
        return Facet.objects.get(protocol=protocol)
    facet_refresh(protocol=protocol)
    facet.refresh_from_db()
    return facet


def facet_cached(*, protocol: Protocol) -> Facet:
    """`facet_ensure` for the doors' hot path: the row from this process's cache (created on the
    first call as `facet_ensure` creates it, only read after that). Any write to the facets table
    empties the cache in every process (apps/core/invalidation.py). Each call gets its own copy,
    so no caller can change what another thread reads."""
    return _facet_copy(cached(TOPIC_FACET, protocol, lambda: facet_ensure(protocol=protocol)))


async def afacet_cached(*, protocol: Protocol) -> Facet:
    """`facet_cached` from the event loop: a hit awaits nothing; a miss reads on a thread."""
    facet = await acached(TOPIC_FACET, protocol, lambda: sync_to_async(facet_ensure)(protocol=protocol))
    return _facet_copy(facet)


_FACET_LIST_FIELDS = ("versions", "profiles", "features", "server_paths", "transports")


def _facet_copy(facet: Facet) -> Facet:
    """A private copy of a loaded row (the JSON lists too), without `copy.copy`'s pickling path:
    it runs on every hot-path request."""
    private = Facet.__new__(Facet)
    fields = private.__dict__
    fields.update(facet.__dict__)
    fields["_state"] = ModelState()
    fields["_state"].db, fields["_state"].adding = facet._state.db, False
    for name in _FACET_LIST_FIELDS:
        fields[name] = list(fields[name])
    return private


def facet_update(*, protocol: Protocol, changes: dict[str, Any], actor: str) -> Facet:
    """Validate and apply an operator's edit; the change is audited in the same transaction."""
    unknown = set(changes) - set(EDITABLE_FIELDS[protocol])
    if unknown:
        raise ValidationFailed(f"Not {protocol} facet fields: {', '.join(sorted(unknown))}.")
    facet_ensure(protocol=protocol)
    # Not durable: the admin calls this inside its own change-form transaction.
    with transaction.atomic():
        facet = Facet.objects.select_for_update().get(protocol=protocol)
        before = facet_fields(facet)
        after = {**before, **changes}
        errors = facet_errors(protocol, after)
        if errors:
            raise ValidationFailed("The facet is not valid.", details={"fields": errors})
        if after == before:
            return facet
        for field, value in changes.items():
            setattr(facet, field, value)
        offered_changed = before["versions"] != after["versions"]
        if offered_changed:
            facet.refreshed_at = None  # a new offered list has not been evaluated yet
        facet.save()
        FacetChange.objects.create(protocol=protocol, actor=actor, before=before, after=after)
        # Every process drops it through the table's trigger; this one does not wait for it.
        invalidate_on_commit(TOPIC_FACET, TOPIC_CARD)
    if offered_changed:
        facet_refresh(protocol=protocol)
        facet.refresh_from_db()
    return facet


def upstream_registry() -> tuple[dict[str, Any], str]:
    path = Path(settings.OPENWOP_UPSTREAM_REGISTRY)
    return json.loads(path.read_text()), str(path)


def facet_refresh(*, protocol: Protocol, today: dt.date | None = None) -> FacetRefresh:
    """Re-evaluate the offered list against the registry; only a clean evaluation moves refreshedAt.

    A list naming versions the registry does not know keeps its old date, so it goes stale in the
    open (flagged in the admin, visible in discovery) instead of being advertised as fresh.
    """
    today = today or _today()
    try:
        registry, source = upstream_registry()
        known = set(registry.get(protocol, []))
        registry_updated = str(registry.get("updated", ""))
    except (OSError, ValueError) as exc:
        logger.error("upstream registry unreadable: %s", exc)
        known, source, registry_updated = set(), str(settings.OPENWOP_UPSTREAM_REGISTRY), ""
    with transaction.atomic():
        facet = Facet.objects.select_for_update().get(protocol=protocol)
        unknown = [v for v in facet.versions if v not in known]
        ok = not unknown
        if ok:
            facet.refreshed_at = today
            facet.save(update_fields=["refreshed_at"])
            invalidate_on_commit(TOPIC_FACET, TOPIC_CARD)
        else:
            logger.warning("%s facet offers versions the upstream registry does not know: %s", protocol, unknown)
        return FacetRefresh.objects.create(
            protocol=protocol, evaluated_on=today, ok=ok, offered=list(facet.versions), unknown=unknown,
            registry_source=source, registry_updated=registry_updated,
        )
