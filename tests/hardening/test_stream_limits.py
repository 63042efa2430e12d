"""Concurrent streams per key, on a real uvicorn started with OPENWOP_MAX_STREAMS_PER_KEY=1: a
second stream of the same key is refused before dispatch in its door's wire (REST SSE, A2A
SubscribeToTask / SendStreamingMessage), a refused streaming send starts no run, another key is
unaffected, and a client disconnect gives the slot back."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from apps.agents.services import workflow_fixtures_seed
from apps.runs.models import Run
from apps.tenants.models import Tenant
from tests.hardening.conftest import a2a_reason
from tests.live import start_web, wait_until


@pytest.fixture(scope="module")
def one_stream_host(_live_env, tmp_path_factory) -> Iterator[str]:  # type: ignore[no-untyped-def]
    env, _ = _live_env
    live, base_url = start_web({**env, "OPENWOP_MAX_STREAMS_PER_KEY": "1"}, tmp_path_factory.mktemp("one-stream"))
    yield base_url
    live.stop()


def _events_url(base: str, run_id: str) -> str:
    return f"{base}/runs/{run_id.replace('/', '~2F')}/events"


def test_one_stream_per_key(one_stream_host: str, make_key, transactional_db) -> None:  # type: ignore[no-untyped-def]
    key, other = make_key("acme"), make_key("globex")
    for slug in ("acme", "globex"):
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug=slug))
    auth = {"Authorization": f"Bearer {key}"}
    created = httpx.post(f"{one_stream_host}/runs", json={"workflowId": "conformance-approval"}, headers=auth)
    assert created.status_code == 201, created.text
    run_id = created.json()["runId"]
    a2a_headers = {**auth, "A2A-Version": "1.0"}

    with httpx.stream("GET", _events_url(one_stream_host, run_id), headers=auth, timeout=30) as first:
        assert first.status_code == 200 and first.headers["content-type"].startswith("text/event-stream")

        second = httpx.get(_events_url(one_stream_host, run_id), headers=auth, timeout=10)
        assert second.status_code == 429 and second.json()["error"] == "rate_limited"
        assert int(second.headers["Retry-After"]) >= 1

        subscribe = {"jsonrpc": "2.0", "id": "s1", "method": "SubscribeToTask", "params": {"id": run_id}}
        refused = httpx.post(f"{one_stream_host}/a2a/jsonrpc", json=subscribe, headers=a2a_headers, timeout=10)
        assert refused.status_code == 429 and refused.json()["id"] == "s1"
        assert a2a_reason(refused.json()) == "RATE_LIMIT_EXCEEDED" and "Retry-After" in refused.headers

        runs_before = Run.unscoped_all_tenants.count()
        stream_send = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "SendStreamingMessage",
            "params": {"message": {"messageId": "st-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
        }
        refused = httpx.post(f"{one_stream_host}/a2a/jsonrpc", json=stream_send, headers=a2a_headers, timeout=10)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == -32000
        assert Run.unscoped_all_tenants.count() == runs_before  # refused before a run existed
        rest_stream = httpx.post(
            f"{one_stream_host}/a2a/rest/message:stream", json=stream_send["params"], headers=a2a_headers, timeout=10
        )
        assert rest_stream.status_code == 429 and rest_stream.json()["error"]["status"] == "RESOURCE_EXHAUSTED"

        # Unary calls of the same key still work, and another key streams freely.
        assert httpx.get(f"{one_stream_host}/runs", headers=auth, timeout=10).status_code == 200
        other_run = httpx.post(
            f"{one_stream_host}/runs",
            json={"workflowId": "conformance-approval"},
            headers={"Authorization": f"Bearer {other}"},
        ).json()["runId"]
        with httpx.stream(
            "GET", _events_url(one_stream_host, other_run), headers={"Authorization": f"Bearer {other}"}, timeout=30
        ) as others:
            assert others.status_code == 200

    # The first stream's client went away: its slot comes back (uvicorn reports the disconnect).
    def reopened() -> bool:
        with httpx.stream("GET", _events_url(one_stream_host, run_id), headers=auth, timeout=10) as again:
            return again.status_code == 200

    assert wait_until(reopened, "the stream slot to be released after the disconnect", timeout=20)
    assert (
        json.loads(httpx.get(f"{one_stream_host}/.well-known/openwop").content)["extensions"]["openwop-host.limits"][
            "maxConcurrentStreamsPerKey"
        ]
        == 1
    )
