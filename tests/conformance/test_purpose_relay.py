"""`conformance-purpose-relay` (security-defaults.md §Onward hops): a message that reached the host
over A2A is relayed to the A2A peer bound as `conformance` (a real a2a-sdk agent on loopback over
HTTPS) with the `permittedPurposes` label it came with, the same list and never a wider one; with
`[]` nothing reaches the peer; an unlabelled message goes on unlabelled. Discovery advertises the
family, and the profile's relay agent routes exactly this fixture."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from a2a.types import Message
from django.core.management import call_command
from django.test import override_settings
from google.protobuf import json_format

from apps.a2a.services import message_start
from apps.agents.services import workflow_fixtures_seed
from apps.peers.services import peer_binding_set
from apps.runs.engine import run_advance
from apps.runs.models import Run
from apps.tenants.models import Tenant
from tests.door_client import DoorClient
from tests.live import free_port
from tests.mcp.conftest import McpCaller
from tests.peers.peer_apps import EchoAgent, a2a_agent_app
from tests.peers.peer_servers import Peer

pytestmark = pytest.mark.django_db(transaction=True)

FIXTURE = "conformance-purpose-relay"
LABEL = ["analytics", "support"]


@pytest.fixture
def peer(acme: McpCaller, serve: Callable[..., Peer]) -> tuple[Peer, EchoAgent]:
    tenant = Tenant.objects.get(slug=acme.tenant)
    workflow_fixtures_seed(tenant=tenant)
    agent, port = EchoAgent(), free_port()
    served = serve("relay-peer.test", a2a_agent_app(f"https://relay-peer.test:{port}", agent), port=port)
    peer_binding_set(tenant=tenant, protocol="a2a", binding_id="conformance", url=served.origin)
    return served, agent


def _relay(caller: McpCaller, text: str, label: list[str] | None) -> Run:
    """What the A2A door does with SendMessage to the relay (the Message recorded with the new
    run), then the run advanced in-process to its end."""
    document: dict[str, Any] = {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]}
    if label is not None:
        document["metadata"] = {"openwop": {"permittedPurposes": label}}
    message = json_format.ParseDict(document, Message())
    run = message_start(
        subject=caller.subject, message=message, workflow_id=FIXTURE, inputs={"text": text}, context_id=None
    )
    run_advance(run_id=run.run_id, worker="test-worker")
    return Run.unscoped_all_tenants.get(pk=run.pk)


def _onward(peer: Peer) -> list[dict[str, Any]]:
    return [s.json() for s in peer.seen if s.method == "POST" and s.json().get("method") == "SendMessage"]


def test_the_label_goes_on_with_the_data_never_widened(acme: McpCaller, peer: tuple[Peer, EchoAgent]) -> None:
    served, agent = peer
    run = _relay(acme, "relay n-1", LABEL)
    assert run.status == "completed", run.error
    [sent] = _onward(served)
    onward = sent["params"]["message"]
    assert [p["text"] for p in onward["parts"]] == ["relay n-1"]
    assert onward["metadata"]["openwop"]["permittedPurposes"] == LABEL  # the same list: no purpose added
    assert agent.metadata_of(0)["openwop"]["permittedPurposes"] == LABEL  # as the peer's SDK read it


def test_an_empty_label_means_no_onward_call(acme: McpCaller, peer: tuple[Peer, EchoAgent]) -> None:
    served, _ = peer
    control = _relay(acme, "relay n-2", None)  # unlabelled: it does go on, so silence below means something
    assert control.status == "completed" and len(_onward(served)) == 1
    assert "permittedPurposes" not in _onward(served)[0]["params"]["message"].get("metadata", {}).get("openwop", {})
    empty = _relay(acme, "relay n-3", [])
    assert empty.status == "completed" and empty.variables["relay"]["relayed"] is False
    assert len(_onward(served)) == 1  # nothing more reached the peer


def test_a_malformed_label_is_read_as_the_narrowest(acme: McpCaller, peer: tuple[Peer, EchoAgent]) -> None:
    served, _ = peer
    run = _relay(acme, "relay n-4", ["analytics", 7])  # type: ignore[list-item]
    assert run.status == "completed" and not _onward(served)


def test_discovery_advertises_propagation_and_the_relay_agent_routes_only_the_relay(acme: McpCaller) -> None:
    doc = DoorClient().get("/.well-known/openwop").json()
    assert doc["purposePropagation"]["propagatesOnward"] is True
    assert FIXTURE in doc["fixtures"]
    out = io.StringIO()
    with override_settings(OPENWOP_CONFORMANCE_SEAMS=True):
        call_command("conformance_profile", "apply", stdout=out, stderr=io.StringIO())
    key = next(
        line.split("=", 1)[1] for line in out.getvalue().splitlines() if line.startswith("export OPENWOP_API_KEY=")
    )
    agents = DoorClient().get("/agents", headers={"Authorization": f"Bearer {key}"}).json()["agents"]
    relays = []
    for entry in agents:
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {"tenant": entry["a2aTenant"]}}
        card = DoorClient().post(
            "/a2a/jsonrpc", data=json.dumps(body), content_type="application/json",
            headers={"Authorization": f"Bearer {key}", "A2A-Version": "1.0"},
        ).json()["result"]  # fmt: skip
        if [s["id"] for s in card["skills"]] == [FIXTURE]:
            relays.append(entry["agentId"])
    assert relays == ["core.conformance.agent-pack.relay"]
