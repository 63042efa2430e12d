"""`agent_card_path` is refused when another route (or the static files) would answer the path
instead of the card, resolved against the real URLconf and named in the message; paths only the
card routes serve are accepted, and the service and the admin form refuse alike."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apps.core.errors import ValidationFailed
from apps.facets.models import Facet
from apps.facets.services import facet_ensure, facet_fields, facet_update
from apps.facets.validation import facet_errors

pytestmark = pytest.mark.django_db


def _card_path_errors(path: object) -> list[str]:
    facet = facet_ensure(protocol="a2a")
    return facet_errors("a2a", {**facet_fields(facet), "agent_card_path": path}).get("agent_card_path", [])


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/runs/run-1", "run-detail"),
        ("/runs", "runs"),
        ("/mcp", "mcp-endpoint"),
        ("/admin/", "admin:index"),
        ("/console/keys/", "console:keys"),
        ("/.well-known/openwop", "discovery"),
        ("/a2a/jsonrpc", "a2a-jsonrpc"),
        ("/a2a/rest/card", "a2a-rest"),
    ],
)
def test_a_path_another_route_serves_is_refused_by_name(path: str, route: str) -> None:
    assert _card_path_errors(path) == [
        f"The agent card path {path} is already served by another route ({route}): "
        "choose a path no other route answers."
    ]


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("cards/agent.json", "absolute path"),
        ("/cards/agent.json?x=1", "absolute path"),
        ("/static/card.json", "under the static files (/static/)"),
        ("/", "The agent card path / is already served by another route (front-door)"),
    ],
)
def test_other_unservable_paths_are_refused(path: str, fragment: str) -> None:
    errors = _card_path_errors(path)
    assert len(errors) == 1 and fragment in errors[0], errors


@pytest.mark.parametrize("path", ["/.well-known/agent-card.json", "/cards/agent.json", "/a2a/card.json"])
def test_paths_the_card_routes_serve_are_accepted(path: str) -> None:
    assert _card_path_errors(path) == []


def test_the_service_and_the_admin_refuse_a_taken_path() -> None:
    with pytest.raises(ValidationFailed) as refused:
        facet_update(protocol="a2a", changes={"agent_card_path": "/runs"}, actor="test")
    assert "already served by another route (runs)" in refused.value.details["fields"]["agent_card_path"][0]
    assert Facet.objects.get(protocol="a2a").agent_card_path == "/.well-known/agent-card.json"
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.test", "pw"))
    form = client.get("/admin/facets/facet/a2a/change/").context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data["agent_card_path"] = "/mcp"
    page = client.post("/admin/facets/facet/a2a/change/", data)
    assert page.status_code == 200 and "already served by another route (mcp-endpoint)" in page.content.decode()
    assert Facet.objects.get(protocol="a2a").agent_card_path == "/.well-known/agent-card.json"
