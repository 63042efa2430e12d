"""Helpers for A2A tests: seeded callers, raw JSON-RPC / HTTP+JSON requests in-process through the
door production serves (tests/door_client.py), and the engine driven in-process (a `db` test never
reaches on_commit, so no worker is involved)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from apps.agents.services import workflow_fixtures_seed
from apps.runs.engine import run_advance
from apps.runs.models import Run
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.subject import Subject
from tests.a2a.live import Session, live_card
from tests.door_client import DoorClient

JSONRPC = "/a2a/jsonrpc"
REST = "/a2a/rest"


@dataclass
class Caller:
    tenant: str
    key: str
    subject: Subject
    client: DoorClient

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", "A2A-Version": "1.0", **extra}

    def rpc(self, method: str, params: Any = None, *, request_id: Any = 1, **headers: str) -> Any:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = params
        return self.client.post(
            JSONRPC, data=json.dumps(body), content_type="application/json", headers=self.headers(**headers)
        )

    def rest_get(self, path: str, **headers: str) -> Any:
        return self.client.get(REST + path, headers=self.headers(**headers))

    def rest_post(self, path: str, body: Any = None, **headers: str) -> Any:
        data = "" if body is None else json.dumps(body)
        return self.client.post(
            REST + path, data=data, content_type="application/json", headers=self.headers(**headers)
        )


@pytest.fixture
def caller_for(make_key) -> Callable[..., Caller]:  # type: ignore[no-untyped-def]
    def _make(slug: str = "acme") -> Caller:
        key = make_key(slug)
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug=slug))  # hooks run on commit only
        return Caller(tenant=slug, key=key, subject=subject_from_api_key(key), client=DoorClient())

    return _make


@pytest.fixture
def acme(caller_for) -> Caller:  # type: ignore[no-untyped-def]
    return caller_for("acme")


@pytest.fixture
def globex(caller_for) -> Caller:  # type: ignore[no-untyped-def]
    return caller_for("globex")


def advance(run_id: str) -> Run:
    """Run the executor in-process until the run suspends or ends."""
    run_advance(run_id=run_id, worker="test-worker")
    return Run.unscoped_all_tenants.get(run_id=run_id)


def user_message(message_id: str, *, text: str | None = "hi", data: Any = None, **fields: Any) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"text": text})
    if data is not None:
        parts.append({"data": data})
    return {"messageId": message_id, "role": "ROLE_USER", "parts": parts, **fields}


def immediately(message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"message": message, "configuration": {"returnImmediately": True}, **extra}


def error_info(body: dict[str, Any]) -> dict[str, Any]:
    """The one ErrorInfo of a JSON-RPC error's data array (asserting there is exactly one)."""
    data = body["error"]["data"]
    assert isinstance(data, list) and all("@type" in d for d in data)
    infos = [d for d in data if d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"]
    assert len(infos) == 1, data
    assert infos[0]["domain"] == "a2a-protocol.org"
    return infos[0]


# --- live a2a-sdk sessions (a real uvicorn + Celery worker) ---


@pytest.fixture
def keys(live_url: str, live_worker, make_key) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"acme": make_key("acme"), "globex": make_key("globex")}


@pytest.fixture
async def sessions(live_url: str, keys: dict[str, str], request) -> AsyncIterator[dict[str, Session]]:  # type: ignore[no-untyped-def]
    """{tenant: Session} on the binding the test parametrizes `sessions` with (indirect)."""
    card = await live_card(live_url)
    made = {tenant: Session(card, request.param, key) for tenant, key in keys.items()}
    yield made
    for session in made.values():
        await session.close()
