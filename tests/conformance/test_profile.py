"""`manage.py conformance_profile apply|clear`: the host in the OpenWOP conformance suite's shape and
out of it again. The interface routes exactly `conformance-approval` while applied, and every route
comes back exactly as it was; the printed variables carry the suite's cross-tenant legs; both
directions are audited and idempotent; a host whose seams are off is refused."""

from __future__ import annotations

import io
import json
import shlex
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from apps.a2a.models import SkillRoute, SkillRoutePin, SkillRoutePinChange
from apps.a2a.services import skill_route_pin, skill_routes_ensure
from apps.agents.fixtures import FIXTURE_WORKFLOWS, OPENWOP_SUITE_FIXTURES
from apps.agents.models import Workflow
from apps.conformance.models import ProfileChange
from apps.peers.models import PeerBinding
from apps.tenants.models import ApiKey, Tenant
from tests.door_client import DoorClient

pytestmark = pytest.mark.django_db

CARD = "/.well-known/agent-card.json"
SEAMS_ON = override_settings(OPENWOP_CONFORMANCE_SEAMS=True)


def _apply(*args: str) -> dict[str, str]:
    """Run `apply` and read its stdout as a shell would (`eval`): every line is `export NAME=value`."""
    out = io.StringIO()
    call_command("conformance_profile", "apply", *args, stdout=out, stderr=io.StringIO())
    variables: dict[str, str] = {}
    for line in out.getvalue().splitlines():
        words = shlex.split(line)
        assert words[0] == "export" and len(words) == 2, line
        name, _, value = words[1].partition("=")
        variables[name] = value
    return variables


def _clear() -> str:
    err = io.StringIO()
    call_command("conformance_profile", "clear", stdout=io.StringIO(), stderr=err)
    return err.getvalue()


def _routes() -> list[tuple[Any, ...]]:
    return list(
        SkillRoute.objects.order_by("workflow_id").values_list("workflow_id", "enabled", "is_default", "position")
    )


def _card_skills() -> list[str]:
    return [skill["id"] for skill in DoorClient().get(CARD).json()["skills"]]


def _rpc(key: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"Authorization": f"Bearer {key}", "A2A-Version": "1.0"}
    response = DoorClient().post(
        "/a2a/jsonrpc", data=json.dumps(body), content_type="application/json", headers=headers
    )
    return response.json()


def _message(message_id: str, **openwop: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    if openwop:
        message["metadata"] = {"openwop": openwop}
    return {"message": message}


def test_refused_on_a_host_whose_seams_are_off() -> None:
    with override_settings(OPENWOP_CONFORMANCE_SEAMS=False), pytest.raises(CommandError) as refused:
        _apply()
    assert refused.value.returncode == 2
    assert "OPENWOP_CONFORMANCE_SEAMS" in str(refused.value) and "seams are off" in str(refused.value)
    # Nothing was changed: no tenant, no pin, no key, no audit row.
    assert not Tenant.objects.filter(slug__in=["conformance", "conformance-b"]).exists()
    assert not SkillRoutePin.objects.exists() and not ProfileChange.objects.exists()


@SEAMS_ON
def test_apply_on_a_fresh_host_routes_exactly_conformance_approval() -> None:
    skill_routes_ensure()
    assert len(_card_skills()) > 1  # a fresh host routes every fixture
    variables = _apply()
    assert _card_skills() == ["conformance-approval"]
    key = variables["OPENWOP_API_KEY"]
    # A message naming no skill starts conformance-approval; naming any other skill is refused.
    started = _rpc(key, "SendMessage", _message("profile-1"))
    assert started["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    refused = _rpc(key, "SendMessage", _message("profile-2", skillId="conformance-noop"))
    assert refused["error"]["code"] == -32602
    # Every fixture of the contract is seeded in both tenants.
    for slug in ("conformance", "conformance-b"):
        seeded = set(Workflow.objects.for_tenant(Tenant.objects.get(slug=slug)).values_list("workflow_id", flat=True))
        assert set(FIXTURE_WORKFLOWS) <= seeded and set(OPENWOP_SUITE_FIXTURES) <= seeded


@SEAMS_ON
def test_clear_restores_every_route_exactly() -> None:
    skill_routes_ensure()
    SkillRoute.objects.filter(workflow_id="conformance-delay").update(enabled=False)  # an operator's own choices
    SkillRoute.objects.filter(workflow_id="conformance-noop").update(position=7)
    routes, skills = _routes(), _card_skills()
    _apply()
    assert _routes() == routes  # the pin routes alone; the table itself is never edited
    assert _clear().startswith("Conformance profile cleared")
    assert _routes() == routes and _card_skills() == skills
    assert not SkillRoutePin.objects.exists()


@SEAMS_ON
def test_clear_restores_an_operators_own_pin() -> None:
    skill_routes_ensure()
    skill_route_pin(workflow_id="echo", actor="admin:olga")
    _apply()
    _apply()  # applied twice: what was pinned before the first apply is still what comes back
    assert _card_skills() == ["conformance-approval"]
    _clear()
    assert _card_skills() == ["echo"]


@SEAMS_ON
def test_apply_and_clear_are_idempotent_and_audited() -> None:
    first = _apply("--actor", "script:ci")
    second = _apply("--actor", "script:ci")
    assert [c.action for c in SkillRoutePinChange.objects.all()] == ["pin"]  # pinned once
    # One live profile key per tenant: the first apply's keys are revoked, the second's work.
    assert (
        DoorClient().get("/agents", headers={"Authorization": f"Bearer {first['OPENWOP_API_KEY']}"}).status_code == 401
    )
    assert (
        DoorClient().get("/agents", headers={"Authorization": f"Bearer {second['OPENWOP_API_KEY']}"}).status_code == 200
    )
    for slug in ("conformance", "conformance-b"):
        live = ApiKey.objects.for_tenant(Tenant.objects.get(slug=slug)).filter(revoked_at__isnull=True)
        assert live.count() == 1
    assert PeerBinding.unscoped_all_tenants.count() == 6  # three per tenant, not six per apply
    _clear()
    assert "nothing to clear" in _clear()
    actions = [(c.action, c.actor) for c in ProfileChange.objects.order_by("at", "id")]
    assert actions[0] == ("apply", "script:ci") and [a for a, _ in actions] == ["apply", "apply", "clear"]
    assert "keyPrefixes" in ProfileChange.objects.order_by("at", "id").first().details  # type: ignore[union-attr]
    assert second["OPENWOP_API_KEY"] not in json.dumps([c.details for c in ProfileChange.objects.all()])
    # Cleared: the profile's keys no longer read anything, and its agents are gone from the inventory.
    assert (
        DoorClient().get("/agents", headers={"Authorization": f"Bearer {second['OPENWOP_API_KEY']}"}).status_code == 401
    )


@SEAMS_ON
def test_printed_variables_carry_the_cross_tenant_legs() -> None:
    variables = _apply("--tenant-b", "other-co")
    for name in (
        "OPENWOP_BASE_URL",
        "OPENWOP_API_KEY",
        "OPENWOP_TEST_TENANT_B_API_KEY",
        "OPENWOP_TEST_TENANT_B_AGENT_ID",
        "OPENWOP_MCP_FAKE_SERVER_PORT",
        "OPENWOP_A2A_FAKE_PEER_PORT",
    ):
        assert variables[name], name
    assert variables["OPENWOP_TARGET_MAJOR"] == "2"
    key_a, key_b = variables["OPENWOP_API_KEY"], variables["OPENWOP_TEST_TENANT_B_API_KEY"]
    assert key_a != key_b

    def inventory(key: str) -> dict[str, dict[str, Any]]:
        agents = DoorClient().get("/agents", headers={"Authorization": f"Bearer {key}"}).json()["agents"]
        return {a["agentId"]: a for a in agents}

    mine, theirs = inventory(key_a), inventory(key_b)
    named = variables["OPENWOP_TEST_TENANT_B_AGENT_ID"]
    # The suite's set difference: an agent with a2aTenant that only tenant B has.
    assert (
        named in theirs
        and named not in mine
        and theirs[named]["a2aTenant"] not in {a.get("a2aTenant") for a in mine.values()}
    )
    # B's own R resolves to B's card for B, and A cannot tell it from one never minted.
    r = theirs[named]["a2aTenant"]
    assert _rpc(key_b, "GetExtendedAgentCard", {"tenant": r})["result"]["name"] == theirs[named]["persona"]
    foreign = _rpc(key_a, "GetExtendedAgentCard", {"tenant": r})
    never = _rpc(key_a, "GetExtendedAgentCard", {"tenant": "A" * 32})
    assert "error" in foreign and foreign == never
    # Tenant B's key reads nothing of A's: A's task is not found for B, exactly as a made-up id.
    task_id = _rpc(key_a, "SendMessage", _message("cross-tenant"))["result"]["task"]["id"]
    assert _rpc(key_b, "GetTask", {"id": task_id}) == _rpc(key_b, "GetTask", {"id": "conformance/" + "A" * 26})
    rest = DoorClient().get(f"/runs/{task_id.replace('/', '~2F')}", headers={"Authorization": f"Bearer {key_b}"})
    assert rest.status_code == 403 and rest.json()["error"] == "id_tenant_mismatch"


def test_an_operator_pins_and_unpins_in_the_admin_through_the_audited_services(client: Any) -> None:
    skill_routes_ensure()
    routes, skills = _routes(), _card_skills()
    client.force_login(User.objects.create_superuser("olga", "olga@example.test", "pw"))
    echo = SkillRoute.objects.get(workflow_id="echo")
    added = client.post("/admin/a2a/skillroutepin/add/", {"route": echo.pk})
    assert added.status_code == 302, added.content
    assert _card_skills() == ["echo"] and _routes() == routes
    pin = SkillRoutePin.objects.get()
    assert client.get("/admin/a2a/skillroutepin/add/").status_code == 403  # one pin at a time
    deleted = client.post(f"/admin/a2a/skillroutepin/{pin.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert _card_skills() == skills and not SkillRoutePin.objects.exists()
    changes = [(c.action, c.before, c.after, c.actor) for c in SkillRoutePinChange.objects.order_by("at", "id")]
    assert changes == [("pin", "", "echo", "admin:olga"), ("unpin", "echo", "", "admin:olga")]


@SEAMS_ON
def test_a_refused_binding_changes_nothing() -> None:
    with pytest.raises(CommandError) as refused:
        _apply("--mcp-server-url", "ftp://127.0.0.1/mcp")
    assert refused.value.returncode == 2 and "http(s) URL" in str(refused.value)
    assert not ProfileChange.objects.exists() and not SkillRoutePin.objects.exists()
    assert not ApiKey.unscoped_all_tenants.filter(label="conformance profile").exists()
