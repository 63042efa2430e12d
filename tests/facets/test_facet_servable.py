"""An operator cannot offer a version the protocol's door cannot serve (apps/facets/servable.py).

The refusal is the same through the service, the model's clean() and so the admin form; a version
a door registers becomes offerable, and one it withdraws stops being so.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from apps.core.errors import ValidationFailed
from apps.facets.models import Facet, FacetChange
from apps.facets.servable import (
    is_servable,
    register_servable_versions,
    servable_versions,
    unregister_servable_versions,
)
from apps.facets.services import facet_ensure, facet_update
from apps.facets.validation import facet_errors

pytestmark = pytest.mark.django_db

MCP_BASE = {
    "versions": ["2026-07-28"],
    "preferred_version": "2026-07-28",
    "minimum_version": "2026-07-28",
    "profiles": ["mcp-2026-07-28"],
    "refresh_window_days": 30,
    "features": ["mrtr"],
    "server_paths": ["/mcp"],
    "transports": ["streamable-http"],
    "mrtr_max_rounds": 4,
}


def test_the_doors_register_what_they_serve() -> None:
    assert "1.0" in servable_versions("a2a") and not is_servable("a2a", "0.3")
    assert {"2025-06-18", "2025-11-25", "2026-07-28"} <= servable_versions("mcp")
    assert not is_servable("mcp", "2025-03-26") and not is_servable("mcp", "2024-11-05")


def test_an_unservable_a2a_version_is_refused_by_the_service_with_a_named_message() -> None:
    facet_ensure(protocol="a2a")
    before = FacetChange.objects.count()
    with pytest.raises(ValidationFailed) as info:
        facet_update(protocol="a2a", changes={"versions": ["0.3", "1.0"]}, actor="admin:op")
    messages = info.value.details["fields"]["versions"]
    assert messages == ["a2a version 0.3 cannot be offered: this host's a2a door does not serve it (servable: 1.0)."]
    assert Facet.objects.get(protocol="a2a").versions == ["1.0"] and FacetChange.objects.count() == before


def test_an_unservable_mcp_revision_is_refused_by_the_admin_check() -> None:
    from django.contrib import admin

    facet = facet_ensure(protocol="mcp")
    facet.versions = ["2024-11-05", "2026-07-28"]
    with pytest.raises(ValidationError) as info:
        admin.site._registry[Facet].instance_check(facet)  # type: ignore[attr-defined]
    assert any("2024-11-05 cannot be offered" in m for m in info.value.message_dict["versions"])


def test_the_admin_form_shows_the_refusal_and_changes_nothing(client: Client) -> None:
    client.force_login(User.objects.create_superuser("op", "op@example.test", "x"))
    facet_ensure(protocol="a2a")
    form = {
        "versions": '["0.3", "1.0"]',
        "preferred_version": "1.0",
        "minimum_version": "1.0",
        "profiles": '["a2a-1.0"]',
        "refresh_window_days": "30",
        "agent_card_path": "/.well-known/agent-card.json",
        "streaming": "on",
        "push_notifications": "on",
        "durable_tasks": "on",
        "agent_cards": "on",
    }
    refused = client.post("/admin/facets/facet/a2a/change/", form)
    assert refused.status_code == 200
    assert "a2a version 0.3 cannot be offered" in refused.content.decode()
    assert Facet.objects.get(protocol="a2a").versions == ["1.0"]


def test_a_registered_version_becomes_offerable_and_a_withdrawn_one_does_not() -> None:
    offered = {**MCP_BASE, "versions": ["2024-11-05", "2026-07-28"]}
    assert "versions" in facet_errors("mcp", offered)
    register_servable_versions("mcp", ["2024-11-05"])
    try:
        assert facet_errors("mcp", offered) == {}
    finally:
        unregister_servable_versions("mcp", ["2024-11-05"])
    assert "versions" in facet_errors("mcp", offered)


def test_a_protocol_nothing_registered_for_serves_nothing() -> None:
    saved = servable_versions("mcp")
    unregister_servable_versions("mcp", saved)
    try:
        errors = facet_errors("mcp", MCP_BASE)
        assert errors["versions"] == [
            "mcp revision 2026-07-28 cannot be offered: this host's mcp door does not serve it (servable: none)."
        ]
    finally:
        register_servable_versions("mcp", saved)
