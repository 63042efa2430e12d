"""Facet rows: validation (every invalid case of interop.md §The facets), audit, refresh SLA."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apps.core.errors import ValidationFailed
from apps.facets.models import Facet, FacetChange, FacetRefresh
from apps.facets.services import facet_ensure, facet_fields, facet_refresh, facet_update
from apps.facets.validation import facet_errors

pytestmark = pytest.mark.django_db


def _a2a(**overrides):  # type: ignore[no-untyped-def]
    base = {
        "versions": ["0.3", "1.0"],
        "preferred_version": "1.0",
        "minimum_version": "1.0",
        "profiles": ["a2a-1.0"],
        "refresh_window_days": 30,
        "agent_card_path": "/.well-known/agent-card.json",
    }
    return {**base, **overrides}


def test_defaults_are_valid_and_evaluated() -> None:
    for protocol in ("a2a", "mcp"):
        facet = facet_ensure(protocol=protocol)
        assert facet_errors(protocol, facet_fields(facet)) == {}
        assert facet.refreshed_at is not None
        assert FacetRefresh.objects.filter(protocol=protocol, ok=True).exists()


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"versions": []}, "versions", "at least one"),
        ({"versions": ["1"]}, "versions", "not a valid"),
        ({"preferred_version": "0.9"}, "preferred_version", "must be one of the offered"),
        ({"minimum_version": "2.0"}, "minimum_version", "must be one of the offered"),
        ({"preferred_version": "0.3", "minimum_version": "1.0"}, "minimum_version", "above the preferred"),
        ({"profiles": ["a2a-0.3-legacy"]}, "profiles", "legacy profiles do not exist"),
        ({"profiles": ["a2a-1.0-legacy"]}, "profiles", "legacy"),
        ({"profiles": ["mcp-2026-07-28"]}, "profiles", "is not an A2A profile"),
        ({"profiles": ["a2a-2.0"]}, "profiles", "not an offered version"),
        ({"refresh_window_days": 91}, "refresh_window_days", "1 to 90"),
        ({"refresh_window_days": 0}, "refresh_window_days", "1 to 90"),
        ({"agent_card_path": "agent.json"}, "agent_card_path", "absolute path"),
    ],
)
def test_invalid_a2a_facets_are_refused_with_a_clear_message(overrides, field, fragment) -> None:  # type: ignore[no-untyped-def]
    errors = facet_errors("a2a", _a2a(**overrides))
    assert field in errors, errors
    assert any(fragment in message for message in errors[field]), errors


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"versions": ["2026-13-45"]}, "versions", "not a valid"),
        ({"versions": ["1.0"], "preferred_version": "1.0", "minimum_version": "1.0"}, "versions", "not a valid"),
        ({"profiles": ["mcp-2025-06-18-legacy"]}, "profiles", "legacy"),
        ({"transports": ["sse"]}, "transports", "not an MCP server transport"),
        ({"mrtr_max_rounds": 17}, "mrtr_max_rounds", "1 to 16"),
        ({"server_paths": ["mcp"]}, "server_paths", "absolute paths"),
    ],
)
def test_invalid_mcp_facets(overrides, field, fragment) -> None:  # type: ignore[no-untyped-def]
    base = {
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
    errors = facet_errors("mcp", {**base, **overrides})
    assert any(fragment in message for message in errors.get(field, [])), errors


def test_update_is_validated_and_audited() -> None:
    facet_ensure(protocol="a2a")
    with pytest.raises(ValidationFailed) as info:
        facet_update(protocol="a2a", changes={"profiles": ["a2a-0.3-legacy"]}, actor="admin:op")
    assert "profiles" in info.value.details["fields"]
    before_count = FacetChange.objects.filter(protocol="a2a").count()
    facet = facet_update(protocol="a2a", changes={"refresh_window_days": 45}, actor="admin:op")
    assert facet.refresh_window_days == 45
    change = FacetChange.objects.filter(protocol="a2a").first()
    assert FacetChange.objects.filter(protocol="a2a").count() == before_count + 1
    assert change.actor == "admin:op"
    assert change.before["refresh_window_days"] == 30 and change.after["refresh_window_days"] == 45


def test_refresh_moves_the_date_only_for_known_versions() -> None:
    facet_ensure(protocol="a2a")
    earlier = dt.date(2026, 11, 1)
    facet_refresh(protocol="a2a", today=earlier)
    assert Facet.objects.get(protocol="a2a").refreshed_at == earlier
    # Offer a version the registry does not know: the evaluation fails and the date does not move.
    Facet.objects.filter(protocol="a2a").update(versions=["1.0", "1.7"])
    result = facet_refresh(protocol="a2a", today=dt.date(2026, 12, 1))
    assert not result.ok and result.unknown == ["1.7"]
    facet = Facet.objects.get(protocol="a2a")
    assert facet.refreshed_at == earlier
    assert facet.is_stale(earlier + dt.timedelta(days=31))
    assert not facet.is_stale(earlier + dt.timedelta(days=30))


def test_refresh_task_reevaluates_both_facets(settings) -> None:  # type: ignore[no-untyped-def]
    from apps.facets.tasks import facets_refresh

    assert facets_refresh.apply().get() == [True, True]
    assert FacetRefresh.objects.filter(protocol="mcp").exists()


def test_registry_file_is_operator_replaceable(tmp_path, settings) -> None:  # type: ignore[no-untyped-def]
    registry = tmp_path / "registry.json"
    registry.write_text(json.dumps({"updated": "2026-12-01", "a2a": ["0.3"], "mcp": []}))
    settings.OPENWOP_UPSTREAM_REGISTRY = str(registry)
    facet_ensure(protocol="a2a")
    result = facet_refresh(protocol="a2a")
    assert not result.ok and result.unknown == ["1.0"] and result.registry_updated == "2026-12-01"


def test_admin_edit_goes_through_validation_and_audit(client: Client) -> None:
    client.force_login(User.objects.create_superuser("op", "op@example.test", "x"))
    facet_ensure(protocol="a2a")
    url = "/admin/facets/facet/a2a/change/"
    page = client.get(url)
    assert page.status_code == 200 and "fresh" in page.content.decode()
    form = {
        "versions": '["1.0"]',
        "preferred_version": "1.0",
        "minimum_version": "1.0",
        "profiles": '["a2a-1.0-legacy"]',
        "refresh_window_days": "30",
        "agent_card_path": "/.well-known/agent-card.json",
        "streaming": "on",
        "push_notifications": "on",
        "durable_tasks": "on",
        "agent_cards": "on",
    }
    refused = client.post(url, form)
    assert refused.status_code == 200 and "legacy profiles do not exist" in refused.content.decode()
    assert Facet.objects.get(protocol="a2a").profiles == ["a2a-1.0"]
    accepted = client.post(url, {**form, "profiles": "[]", "refresh_window_days": "60"})
    assert accepted.status_code == 302
    facet = Facet.objects.get(protocol="a2a")
    assert facet.refresh_window_days == 60 and facet.profiles == []
    assert FacetChange.objects.filter(actor="admin:op").count() == 1


def test_facet_audit_rows_are_append_only_in_postgresql() -> None:
    from django.db import DatabaseError, connection, transaction

    facet_ensure(protocol="a2a")
    for table in ("facets_facetchange", "facets_facetrefresh"):
        for sql in (f"UPDATE {table} SET protocol = 'mcp'", f"DELETE FROM {table}"):
            with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cur:
                cur.execute(sql)
