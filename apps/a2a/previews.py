"""The A2A cards as the admin previews them: exactly as they are served (signed when a key is
active), on the agents' and the facets' pages (apps/a2a/admin.py)."""

from __future__ import annotations

import json
from typing import Any

from apps.a2a.card import agent_card, public_card_current
from apps.a2a.signing import card_sign
from apps.agents.models import Agent
from apps.agents.selectors import agent_get_readable
from apps.core.errors import NotFound
from apps.runs.a2a_wire import to_wire
from apps.tenants.subject import Subject


def served_card_wire() -> dict[str, Any]:
    """The public agent card as served (apps/facets/admin.py's preview of an edit)."""
    return to_wire(card_sign(public_card_current()[0]))


def agent_card_preview(agent: Agent) -> str | None:
    """The agent's A2A card exactly as a caller of its tenant is served it (apps/a2a/card.py), or
    None when no card is served for it (unpublished, nothing routed, or per-agent cards off)."""
    host_card = public_card_current()[0]
    if not host_card.capabilities.extended_agent_card:
        return None
    reader = Subject(issuer="openwop-host/admin", subject_id="admin-preview", tenant=agent.tenant.slug, kind="user")
    try:
        entry = agent_get_readable(subject=reader, agent_id=agent.agent_id)
    except NotFound:
        return None
    if entry.a2a_tenant is None:
        return None
    signed = card_sign(agent_card(host_card=host_card, entry=entry))  # as served: signed when a key is active
    return json.dumps(to_wire(signed), indent=2, sort_keys=True)
