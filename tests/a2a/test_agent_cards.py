"""Per-agent cards (interop.md §Per-agent cards; RFC 0202): GetExtendedAgentCard with `tenant: R`,
SendMessage pinned to an agent, and non-disclosure, on both bindings."""

from __future__ import annotations

import json
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    GetExtendedAgentCardRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
)
from asgiref.sync import sync_to_async
from django.test import override_settings
from google.protobuf import json_format

from apps.agents.models import Agent
from apps.agents.routing_values import a2a_tenant_of
from apps.agents.services import DEMO_AGENT, DEMO_AGENT_ID, agent_create, agent_unpublish
from apps.facets.services import facet_update
from apps.runs.models import Run
from apps.runs.wire import run_snapshot_doc
from apps.tenants.models import Tenant
from tests.a2a.conftest import REST, Caller, error_info, immediately, user_message
from tests.a2a.live import db_read, repointed
from tests.door_client import DoorClient

CARD = "/.well-known/agent-card.json"


@dataclass
class Minted:
    acme_helper: str
    acme_quiet: str  # described by its label only
    acme_draft: str  # unpublished: never handed out
    globex_helper: str


@pytest.fixture
def minted(acme: Caller, globex: Caller) -> Minted:
    acme_t, globex_t = Tenant.objects.get(slug="acme"), Tenant.objects.get(slug="globex")
    helper = agent_create(
        tenant=acme_t,
        actor="test",
        agent_id="helper",
        persona="Acme Helper",
        label="Helper",
        description="Helps acme.",
        pack_version="2.1.0",
        roster=["conformance-noop", "conformance-approval", "missing-workflow"],
        published=True,
        degraded=["memory.semantic"],
        memory_degraded=True,
    )
    quiet = agent_create(
        tenant=acme_t,
        actor="test",
        agent_id="quiet",
        persona="Quiet",
        label="Quiet label",
        roster=["conformance-approval"],
        published=True,
    )
    draft = agent_create(tenant=acme_t, actor="test", agent_id="draft", persona="Draft", roster=["conformance-noop"])
    g_helper = agent_create(
        tenant=globex_t,
        actor="test",
        agent_id="helper",
        persona="Globex Helper",
        roster=["conformance-noop"],
        published=True,
    )
    return Minted(
        acme_helper=a2a_tenant_of(agent=helper),
        acme_quiet=a2a_tenant_of(agent=quiet),
        acme_draft=a2a_tenant_of(agent=draft),
        globex_helper=a2a_tenant_of(agent=g_helper),
    )


def _result(response: Any) -> dict[str, Any]:
    body = response.json()
    assert "result" in body, body
    return body["result"]


def _inventory_r(caller: Caller, agent_id: str) -> str:
    response = caller.client.get("/agents", headers={"Authorization": f"Bearer {caller.key}"})
    return next(e["a2aTenant"] for e in response.json()["agents"] if e["agentId"] == agent_id)


def test_inventory_hands_out_the_minted_values(acme: Caller, globex: Caller, minted: Minted) -> None:
    assert _inventory_r(acme, "helper") == minted.acme_helper
    assert _inventory_r(globex, "helper") == minted.globex_helper


def test_extended_card_per_agent(acme: Caller, minted: Minted) -> None:
    public = DoorClient().get(CARD).json()
    assert public["capabilities"]["extendedAgentCard"] is True
    card = _result(acme.rpc("GetExtendedAgentCard", {"tenant": minted.acme_helper}))
    assert card["name"] == "Acme Helper" and card["version"] == "2.1.0" and card["description"] == "Helps acme."
    assert card["supportedInterfaces"] == [{**i, "tenant": minted.acme_helper} for i in public["supportedInterfaces"]]
    assert card["capabilities"] == public["capabilities"]
    assert card["securitySchemes"] == public["securitySchemes"]
    assert card["securityRequirements"] == public["securityRequirements"]
    # One skill per workflow routed to the agent for this caller (the missing one is not routed).
    assert [s["id"] for s in card["skills"]] == ["conformance-noop", "conformance-approval"]
    assert all(s["name"] and s["description"] and s["tags"] for s in card["skills"])
    # SR-1 and the entry's own fields stay off the card.
    assert not {"degraded", "memoryDegraded", "agentId", "roster", "a2aTenant"} & set(card)
    assert "degraded" not in json.dumps(card)

    quiet = _result(acme.rpc("GetExtendedAgentCard", {"tenant": minted.acme_quiet}))
    assert quiet["name"] == "Quiet" and quiet["description"] == "Quiet label"  # description, else label
    assert [s["id"] for s in quiet["skills"]] == ["conformance-approval"]

    # HTTP+JSON carries the tenant as the leading path segment; same card.
    rest = acme.rest_get(f"/{minted.acme_helper}/extendedAgentCard")
    assert rest.status_code == 200 and rest.json() == card


def test_extended_card_without_tenant_is_the_host_card(acme: Caller, minted: Minted) -> None:
    public = DoorClient().get(CARD).json()
    assert _result(acme.rpc("GetExtendedAgentCard")) == public
    assert acme.rest_get("/extendedAgentCard").json() == public


def test_public_card_lists_no_routing_value(acme: Caller, globex: Caller, minted: Minted) -> None:
    values = [minted.acme_helper, minted.acme_quiet, minted.acme_draft, minted.globex_helper]
    for headers in ({}, {"A2A-Version": "1.0"}, {"Authorization": f"Bearer {acme.key}"}):
        body = DoorClient().get(CARD, headers=headers).content.decode()
        assert not [r for r in values if r in body]
        assert '"tenant"' not in body


def _never_minted() -> str:
    return secrets.token_urlsafe(24)[:32]


UNKNOWN_RPC = ["never", "foreign", "unpublished", "../../etc", "a/b", "x" * 300, "bad value ~!"]


def _unknown_values(minted: Minted) -> list[str]:
    named = {"never": _never_minted(), "foreign": minted.globex_helper, "unpublished": minted.acme_draft}
    return [named.get(v, v) for v in UNKNOWN_RPC]


def test_outside_r_answers_like_never_minted_on_jsonrpc(acme: Caller, minted: Minted) -> None:
    created = _result(acme.rpc("SendMessage", immediately(user_message("own-task"))))["task"]["id"]
    runs_before = Run.unscoped_all_tenants.count()
    calls: list[tuple[str, dict[str, Any]]] = [
        ("GetExtendedAgentCard", {}),
        ("SendMessage", immediately(user_message("via-r"))),
        ("SendStreamingMessage", {"message": user_message("via-r-stream")}),
        ("GetTask", {"id": created}),
        ("GetTask", {"id": "globex/AAAAAAAAAAAAAAAAAAAAAAAAAA"}),
        ("ListTasks", {"pageSize": 5}),
    ]
    for method, params in calls:
        answers = {acme.rpc(method, {**params, "tenant": r}, request_id=7).content for r in _unknown_values(minted)}
        assert len(answers) == 1, (method, answers)
        if method in ("GetExtendedAgentCard", "SendMessage", "SendStreamingMessage"):
            body = json.loads(answers.pop())
            assert body["error"]["code"] == -32602 and error_info(body)["metadata"]["field"] == "tenant"
            assert minted.globex_helper not in body["error"]["message"]
    assert Run.unscoped_all_tenants.count() == runs_before  # nothing started through an outside R
    # Operations an agent does not change treat tenant as the opaque hint it is: a valid R too.
    assert (
        acme.rpc("GetTask", {"id": created, "tenant": minted.acme_helper}, request_id=7).content
        == acme.rpc("GetTask", {"id": created, "tenant": _never_minted()}, request_id=7).content
    )


def test_outside_r_answers_like_never_minted_on_rest(acme: Caller, minted: Minted) -> None:
    created = _result(acme.rpc("SendMessage", immediately(user_message("own-task-rest"))))["task"]["id"]
    segments = [_never_minted(), minted.globex_helper, minted.acme_draft, "bad%20value", "a%2Fb", "x" * 200]
    for method, path, body in (
        ("GET", "/extendedAgentCard", None),
        ("POST", "/message:send", immediately(user_message("rest-via-r"))),
        ("GET", f"/tasks/{created}", None),
    ):
        answers = set()
        for segment in segments:
            if method == "GET":
                response = acme.rest_get(f"/{segment}{path}")
            else:
                response = acme.rest_post(f"/{segment}{path}", body)
            answers.add((response.status_code, response.content))
        assert len(answers) == 1, (path, answers)


def test_authentication_comes_before_resolution(minted: Minted) -> None:
    anonymous = DoorClient()
    answers = set()
    for r in (minted.acme_helper, _never_minted()):
        response = anonymous.post(
            "/a2a/jsonrpc",
            data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {"tenant": r}}),
            content_type="application/json",
        )
        answers.add((response.status_code, response.content))
        rest = anonymous.get(f"{REST}/{r}/extendedAgentCard")
        answers.add((rest.status_code, rest.content))
    assert len(answers) == 2 and {status for status, _ in answers} == {401}  # one per binding


def test_send_message_pins_the_agent_in_the_callers_tenant(acme: Caller, globex: Caller, minted: Minted) -> None:
    task = _result(acme.rpc("SendMessage", immediately(user_message("pin-1"), tenant=minted.acme_helper)))["task"]
    run = Run.unscoped_all_tenants.select_related("workflow", "tenant").get(run_id=task["id"])
    assert run.tenant.slug == "acme" and run.workflow.workflow_id == "conformance-noop"  # default: first routed
    assert run.agent_id == "helper"  # pinned (RFC 0202): the snapshot names the agent
    assert run_snapshot_doc(run)["agent"] == {"agentId": "helper"}
    untargeted = _result(acme.rpc("SendMessage", immediately(user_message("pin-0"))))["task"]["id"]
    assert "agent" not in run_snapshot_doc(Run.unscoped_all_tenants.get(run_id=untargeted))

    named = immediately(
        user_message("pin-2", metadata={"openwop": {"skillId": "conformance-approval"}}), tenant=minted.acme_helper
    )
    named_id = _result(acme.rpc("SendMessage", named))["task"]["id"]
    run = Run.unscoped_all_tenants.select_related("workflow").get(run_id=named_id)
    assert run.workflow.workflow_id == "conformance-approval"

    # A skill not routed to this agent (even one the host card lists) is refused.
    outside = immediately(
        user_message("pin-3", metadata={"openwop": {"skillId": "conformance-failure"}}), tenant=minted.acme_quiet
    )
    body = acme.rpc("SendMessage", outside).json()
    assert body["error"]["code"] == -32602 and error_info(body)["metadata"]["field"] == "skillId"

    # Over HTTP+JSON the path carries R; the run is still the caller's.
    rest = acme.rest_post(f"/{minted.acme_quiet}/message:send", immediately(user_message("pin-4")))
    run = Run.unscoped_all_tenants.select_related("workflow", "tenant").get(run_id=rest.json()["task"]["id"])
    assert run.tenant.slug == "acme" and run.workflow.workflow_id == "conformance-approval"

    # globex with its own R runs in globex; acme's R means nothing to globex.
    task = _result(globex.rpc("SendMessage", immediately(user_message("g-1"), tenant=minted.globex_helper)))["task"]
    assert task["id"].startswith("globex/")
    assert (
        globex.rpc("SendMessage", immediately(user_message("g-2"), tenant=minted.acme_helper)).json()["error"]["code"]
        == -32602
    )


def test_unpublishing_makes_r_unknown(acme: Caller, minted: Minted) -> None:
    assert "result" in acme.rpc("GetExtendedAgentCard", {"tenant": minted.acme_quiet}).json()
    agent_unpublish(agent=Agent.objects.for_tenant(Tenant.objects.get(slug="acme")).get(agent_id="quiet"), actor="t")
    assert (
        acme.rpc("GetExtendedAgentCard", {"tenant": minted.acme_quiet}, request_id=3).content
        == acme.rpc("GetExtendedAgentCard", {"tenant": _never_minted()}, request_id=3).content
    )


def test_without_agent_cards_tenant_is_ignored(acme: Caller, minted: Minted) -> None:
    facet_update(protocol="a2a", changes={"agent_cards": False}, actor="test")
    assert DoorClient().get(CARD).json()["capabilities"]["extendedAgentCard"] is False
    body = acme.rpc("GetExtendedAgentCard", {"tenant": minted.acme_helper}).json()
    assert body["error"]["code"] == -32007
    task = _result(acme.rpc("SendMessage", immediately(user_message("off-1"), tenant=_never_minted())))["task"]
    assert task["id"].startswith("acme/")  # the host default skill, in the caller's tenant


# ---------------------------------------------------------------------------------------------
# Black-box: the a2a-sdk client against a live server, on both bindings


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_sdk_client_reaches_the_agent_through_its_card(
    live_url: str,
    live_worker,
    live_env,
    make_key,
    binding: str,  # type: ignore[no-untyped-def]
) -> None:
    key = await sync_to_async(make_key)("acme")  # tenant hooks seed the demo agent on commit
    env, _ = live_env

    def routing_value() -> str:
        demo = Agent.objects.for_tenant(Tenant.objects.get(slug="acme")).get(agent_id=DEMO_AGENT_ID)
        with override_settings(SECRET_KEY=env["DJANGO_SECRET_KEY"]):  # the live host's key
            return a2a_tenant_of(agent=demo)

    r = await db_read(routing_value)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=90) as http:
        public = json_format.ParseDict((await http.get(f"{live_url}{CARD}")).json(), AgentCard())
        assert public.capabilities.extended_agent_card and r not in json_format.MessageToJson(public)
        config = ClientConfig(streaming=False, supported_protocol_bindings=[binding], httpx_client=http)
        host_client = ClientFactory(config).create(repointed(public, live_url))
        card = await host_client.get_extended_agent_card(GetExtendedAgentCardRequest(tenant=r))
        assert card.name == DEMO_AGENT["persona"] and card.version == DEMO_AGENT["pack_version"]
        assert {i.tenant for i in card.supported_interfaces} == {r}
        assert [s.id for s in card.skills] == DEMO_AGENT["roster"]

        # A client built from the agent's card carries `tenant: R` on every request by itself.
        agent_client = ClientFactory(config).create(repointed(card, live_url))
        request = SendMessageRequest(
            message=Message(role=Role.ROLE_USER, message_id=f"live-{uuid.uuid4()}", parts=[Part(text="hi")]),
            configuration=SendMessageConfiguration(return_immediately=True),
        )
        events = [event async for event in agent_client.send_message(request)]
        task = events[0].task
        assert task.id.startswith("acme/")
        run = await db_read(lambda: Run.unscoped_all_tenants.select_related("workflow").get(run_id=task.id))
        assert run.workflow.workflow_id == DEMO_AGENT["roster"][0]
