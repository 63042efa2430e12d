"""Issue 33 item 4: a peer credential goes only to the origin it was registered for. A real HTTPS
peer serves an agent card whose JSON-RPC interface is on a second HTTPS server (the "collector"):
the run fails with `openwop-host.peer_endpoint_origin_mismatch` and the collector's request log
stays empty; a card naming its own origin still works, and without a credential there is nothing
to withhold."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from apps.runs.models import Run, RunStatus
from tests.live import free_port
from tests.peers.conftest import Caller, credential_for, events, run_node
from tests.peers.peer_apps import EchoAgent, a2a_agent_app
from tests.peers.peer_servers import Peer

pytestmark = pytest.mark.django_db(transaction=True)

MISMATCH = "openwop-host.peer_endpoint_origin_mismatch"
SECRET = "s3cret-for-the-peer-only"


@dataclass
class Pair:
    peer: Peer  # serves the card the workflow's URL names
    collector: Peer  # a working A2A agent on another origin, which the card may point at
    collector_agent: EchoAgent


def _pair(serve: Callable[..., Peer], *, card_points_at_collector: bool) -> Pair:
    collector_port, peer_port = free_port(), free_port()
    collector_origin = f"https://collector.test:{collector_port}"
    collector_agent = EchoAgent()
    collector = serve("collector.test", a2a_agent_app(collector_origin, collector_agent), port=collector_port)
    peer_origin = f"https://card-peer.test:{peer_port}"
    endpoint_base = collector_origin if card_points_at_collector else peer_origin
    peer = serve("card-peer.test", a2a_agent_app(endpoint_base, EchoAgent()), port=peer_port)
    return Pair(peer, collector, collector_agent)


def _call(caller: Caller, pair: Pair, credential: str | None) -> Run:
    config = {"url": pair.peer.origin, "text": "hello", **({"credentialId": credential} if credential else {})}
    return run_node(caller, "a2a.call", config)


def test_a_card_naming_another_origin_gets_nothing_sent_there(acme: Caller, serve: Callable[..., Peer]) -> None:
    pair = _pair(serve, card_points_at_collector=True)
    run = _call(acme, pair, credential_for(acme, pair.peer.origin, secret=SECRET))

    assert run.status == RunStatus.FAILED, run.outputs
    assert run.error["code"] == MISMATCH
    assert run.error["details"] == {"credentialOrigin": pair.peer.origin, "endpointOrigin": pair.collector.origin}
    [node_failed] = events(run, "node.failed")
    assert node_failed.payload["error"]["code"] == MISMATCH
    # The collector received nothing at all (no message, no credential); the peer only its card.
    assert pair.collector.seen == [] and pair.collector_agent.messages == []
    assert [(s.method, s.path) for s in pair.peer.seen] == [("GET", "/.well-known/agent-card.json")]
    assert SECRET not in str(run.error)


def test_a_card_naming_its_own_origin_still_works(acme: Caller, serve: Callable[..., Peer]) -> None:
    pair = _pair(serve, card_points_at_collector=False)
    run = _call(acme, pair, credential_for(acme, pair.peer.origin, secret=SECRET))

    assert run.status == RunStatus.COMPLETED, run.error
    assert run.outputs["result"]["task"]["artifacts"][0]["parts"][0]["text"] == "echo: hello"
    assert [s.method for s in pair.peer.seen] == ["GET", "POST", *(["POST"] * (len(pair.peer.seen) - 2))]
    assert all(s.headers["authorization"] == f"Bearer {SECRET}" for s in pair.peer.seen)
    assert pair.collector.seen == []


def test_without_a_credential_the_card_s_endpoint_is_called_bare(acme: Caller, serve: Callable[..., Peer]) -> None:
    """No credential, nothing to withhold: the endpoint elsewhere is called (through the egress
    guard), and no request anywhere carries an Authorization."""
    pair = _pair(serve, card_points_at_collector=True)
    run = _call(acme, pair, None)

    assert run.status == RunStatus.COMPLETED, run.error
    assert [m.parts[0].text for m in pair.collector_agent.messages] == ["hello"]
    assert not any("authorization" in s.headers for s in [*pair.peer.seen, *pair.collector.seen])


def test_another_tenants_credential_is_not_found_and_nothing_is_sent(
    acme: Caller, globex: Caller, serve: Callable[..., Peer]
) -> None:
    pair = _pair(serve, card_points_at_collector=True)
    acme_credential = credential_for(acme, pair.peer.origin, secret=SECRET)
    run = _call(globex, pair, acme_credential)

    assert run.status == RunStatus.FAILED and run.error["code"] == "not_found"
    assert pair.peer.seen == [] and pair.collector.seen == []
