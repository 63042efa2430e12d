"""The conformance agent pack (`core.conformance.agent-pack`, SR-1): its agents keep a system prompt
and handoff schemas carrying the suite's canaries, and no card ever shows either: not the host
card (with or without A2A-Version, signed or not), not any per-agent card of either tenant, not the
inventory, which says only `packName` and `hasHandoffSchemas: true`."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from apps.agents.fixtures import CONFORMANCE_AGENT_PACK
from apps.agents.models import Agent
from tests.door_client import DoorClient

pytestmark = pytest.mark.django_db

CANARIES = ("OPENWOP-CONFORMANCE-CANARY-0202-PROMPT", "OPENWOP-CONFORMANCE-CANARY-0202-HANDOFF")


@pytest.fixture
def keys() -> dict[str, str]:
    out = io.StringIO()
    with override_settings(OPENWOP_CONFORMANCE_SEAMS=True):
        call_command("conformance_profile", "apply", stdout=out, stderr=io.StringIO())
    exported = dict(line.removeprefix("export ").split("=", 1) for line in out.getvalue().splitlines())
    return {"a": exported["OPENWOP_API_KEY"], "b": exported["OPENWOP_TEST_TENANT_B_API_KEY"]}


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "A2A-Version": "1.0"}


def _card(key: str, tenant: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {"tenant": tenant}}
    answer = DoorClient().post(
        "/a2a/jsonrpc", data=json.dumps(body), content_type="application/json", headers=_auth(key)
    )
    return answer.json()["result"]


def _leaks(text: str) -> list[str]:
    return [canary for canary in CANARIES if canary in text]


def test_the_canaries_are_installed_so_their_absence_means_something(keys: dict[str, str]) -> None:
    pack = Agent.unscoped_all_tenants.filter(pack_name=CONFORMANCE_AGENT_PACK)
    assert sorted(pack.values_list("tenant__slug", "agent_id")) == [
        ("conformance", "core.conformance.agent-pack.relay"),
        ("conformance", "core.conformance.agent-pack.resolver"),
        ("conformance-b", "core.conformance.agent-pack.escalator"),
    ]
    for agent in pack:
        assert _leaks(agent.system_prompt + json.dumps(agent.handoff_schemas)) == list(CANARIES)


def test_no_card_and_no_inventory_entry_carries_a_canary(keys: dict[str, str]) -> None:
    for headers in ({}, {"A2A-Version": "1.0"}):
        assert not _leaks(DoorClient().get("/.well-known/agent-card.json", headers=headers).text)
    for key in keys.values():
        assert not _leaks(DoorClient().get("/.well-known/agent-card.json", headers=_auth(key)).text)
        inventory = DoorClient().get("/agents", headers=_auth(key))
        assert not _leaks(inventory.text)
        pack = [e for e in inventory.json()["agents"] if e.get("packName") == CONFORMANCE_AGENT_PACK]
        assert pack and all(e["hasHandoffSchemas"] is True and e.get("a2aTenant") for e in pack)
        for entry in inventory.json()["agents"]:
            assert not _leaks(DoorClient().get(f"/agents/{entry['agentId']}", headers=_auth(key)).text)
            card = _card(key, entry["a2aTenant"])
            assert card["name"] == entry["persona"] and not _leaks(json.dumps(card))


def test_tenant_b_agent_is_not_tenant_as(keys: dict[str, str]) -> None:
    escalator = "core.conformance.agent-pack.escalator"
    assert DoorClient().get(f"/agents/{escalator}", headers=_auth(keys["a"])).status_code == 404
    assert DoorClient().get(f"/agents/{escalator}", headers=_auth(keys["b"])).status_code == 200
