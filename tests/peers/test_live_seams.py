"""Black box, as the conformance suite drives it: a real uvicorn with the seams on calls real peers
over HTTPS through its egress guard (loopback allowed and the test CA trusted for that process
only), and the decision is read back with openwop-client's events poll."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from openwop_client import OpenwopClient

from tests.live import free_port, start_web
from tests.peers.peer_apps import EchoAgent, a2a_agent_app, mcp_adder_app
from tests.peers.peer_servers import Peer, https_asgi_peer

LOOPBACK = "127.0.0.1"


@pytest.fixture(scope="module")
def seams_host(live_env: Any, ca_bundle: str) -> Iterator[str]:
    env, var_dir = live_env
    own_env = {
        **env,
        "OPENWOP_CONFORMANCE_SEAMS": "1",
        "OPENWOP_CELERY_QUEUE": f"{env['OPENWOP_CELERY_QUEUE']}-seams",  # the seam advances its run inline
        "OPENWOP_EGRESS_ALLOW_CIDRS": "127.0.0.0/8",
        "OPENWOP_EGRESS_CA_BUNDLE": ca_bundle,
    }
    live, base_url = start_web(own_env, var_dir)
    yield base_url
    live.stop()


@pytest.fixture
def peers(ca: trustme.CA, tmp_path: Path) -> Iterator[tuple[Peer, Peer]]:
    port = free_port()
    agent = a2a_agent_app(f"https://{LOOPBACK}:{port}", EchoAgent())
    with (
        https_asgi_peer(ca, LOOPBACK, agent, tmp_path, port=port) as a2a_peer,
        https_asgi_peer(ca, LOOPBACK, mcp_adder_app(), tmp_path) as mcp_peer,
    ):
        yield a2a_peer, mcp_peer


@pytest.mark.usefixtures("transactional_db")
def test_both_seams_over_a_live_host(seams_host: str, peers: tuple[Peer, Peer], make_key: Any) -> None:
    a2a_peer, mcp_peer = peers
    key = make_key("acme")
    headers = {"Authorization": f"Bearer {key}"}
    discovery = httpx.get(f"{seams_host}/.well-known/openwop", timeout=30).json()
    assert discovery["conformance"]["seamsProfile"] == "openwop-conformance-seams-v2"
    client = OpenwopClient(base_url=seams_host, api_key=key, timeout=30)

    for path, body, peer, version in (
        ("a2a", {"peerUrl": a2a_peer.origin}, a2a_peer, "1.0"),
        (
            "mcp",
            {"serverUrl": f"{mcp_peer.origin}/mcp", "tool": "add", "arguments": {"a": 1, "b": 2}},
            mcp_peer,
            "2026-07-28",
        ),
    ):
        response = httpx.post(
            f"{seams_host}/conformance/seams/sample/{path}/invoke", json=body, headers=headers, timeout=60
        )
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["negotiatedVersion"] == version and answer["protocol"] == path
        assert answer["peerDigest"] == hashlib.sha256(peer.origin.encode()).hexdigest()
        polled = client.runs_poll_events(answer["runId"])
        [decided] = [e for e in polled.events if e.type == "negotiation.decided"]
        payload = decided.payload
        assert (payload["outcome"], payload["version"], payload["requested"]) == ("accepted", version, version)
        assert peer.seen, "the peer received nothing"

    assert answer["result"]["structuredContent"] == {"result": 3}
