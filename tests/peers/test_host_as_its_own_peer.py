"""Our own host as the peer of itself, two tenants apart: tenant acme's workflow calls the host's
A2A interface and MCP mount (served over HTTPS by a real server process, runs executed by a real
Celery worker) presenting tenant globex's API key, registered by acme as a peer credential.

It proves the whole loop: the outbound negotiation meets our inbound one, the peer-side run lands
in globex (the credential's tenant, never the caller's), the trace id crosses the hop, and the MCP
round trip resolves an approval through MRTR on our own mount.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from apps.runs.models import Run, RunStatus, RunTransport
from apps.runs.trace_context import trace_id_of
from tests.live import LiveProcess, free_port, wait_until
from tests.peers.conftest import Caller, credential_for, decisions, run_node

pytestmark = pytest.mark.django_db(transaction=True)
NAME = "self-peer.test"


@pytest.fixture(scope="module")
def https_host(_live_env: Any, ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The host served over TLS by uvicorn (Daphne's TLS endpoint needs pyOpenSSL), as NAME."""
    env, var_dir = _live_env
    port = free_port()
    pem = Path(tmp_path_factory.mktemp("self-peer")) / "host.pem"
    ca.issue_cert(NAME).private_key_and_cert_chain_pem.write_to_path(str(pem))
    origin = f"https://{NAME}:{port}"
    log_path = var_dir / f"uvicorn-{port}.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "openwop_host.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--ssl-keyfile",
            str(pem),
            "--ssl-certfile",
            str(pem),
            "--lifespan",
            "off",
            "--log-level",
            "warning",
        ],
        cwd=Path(__file__).resolve().parents[2],
        env={**env, "DJANGO_ALLOWED_HOSTS": f"{NAME},127.0.0.1", "OPENWOP_PUBLIC_URL": origin},
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    live = LiveProcess(proc=proc, log_path=log_path)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            live.stop(kill=True)
            raise RuntimeError(f"the HTTPS host did not start:\n{live.log()}")
        try:
            if httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    yield origin
    live.stop()


@pytest.fixture
def self_peer(https_host: str, live_worker: Any, dns: Any) -> str:
    dns.set(NAME, ["127.0.0.1"])
    return https_host


def test_a2a_call_to_ourselves_lands_in_the_credentials_tenant(acme: Caller, globex: Caller, self_peer: str) -> None:
    credential = credential_for(acme, self_peer, secret=globex.key)
    run = run_node(acme, "a2a.call", {"url": self_peer, "text": "from acme", "credentialId": credential})

    assert run.status == RunStatus.COMPLETED, run.error
    assert run.outputs["negotiatedVersion"] == "1.0"
    task = run.outputs["result"]["task"]
    # The default skill is echo (issue 53 item 6): the peer's task answers at once.
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    peer_run = Run.unscoped_all_tenants.get(run_id=task["id"])
    assert peer_run.run_id.startswith("globex/") and peer_run.transport == RunTransport.A2A
    assert peer_run.owner["subject"]["subjectId"] == globex.subject.subject_id
    assert trace_id_of(peer_run.traceparent) == trace_id_of(run.traceparent)
    [decided] = decisions(run)
    assert (decided["outcome"], decided["version"], decided["requested"]) == ("accepted", "1.0", "1.0")


def test_mcp_call_to_ourselves_answers_an_approval_through_mrtr(acme: Caller, globex: Caller, self_peer: str) -> None:
    credential = credential_for(acme, self_peer, secret=globex.key)
    answer = {"action": "accept", "content": {"action": "accept"}}
    run = run_node(
        acme,
        "mcp.call",
        {
            "url": f"{self_peer}/mcp",
            "tool": "conformance-approval",
            "credentialId": credential,
            "elicitationAnswer": answer,
            "timeoutMs": 60_000,
        },
    )

    assert run.status == RunStatus.COMPLETED, run.error
    result = run.outputs["result"]
    assert result.get("isError") in (None, False) and result["resultType"] == "complete"
    peer_run_id = result["_meta"]["dev.openwop/runId"]
    peer_run = wait_until(
        lambda: (r := Run.unscoped_all_tenants.get(run_id=peer_run_id)).is_terminal and r, "the peer run to end"
    )
    assert peer_run.status == RunStatus.COMPLETED and peer_run.run_id.startswith("globex/")
    assert trace_id_of(peer_run.traceparent) == trace_id_of(run.traceparent)
    [decided] = decisions(run)
    assert (decided["outcome"], decided["version"]) == ("accepted", "2026-07-28")
