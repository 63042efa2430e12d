"""A stream gives its key's slot back however it ends (issue 33 item 9), on a real uvicorn and
`grpc_serve` started with OPENWOP_MAX_STREAMS_PER_KEY=2.

One key finishes three times as many streams as it may hold at once on every streaming binding:
REST SSE `/runs/{id}/events` read to the run's end, `/host/events` left by the client, and A2A
SendStreamingMessage and SubscribeToTask over JSON-RPC, HTTP+JSON (a2a-sdk) and gRPC. After each
binding's streams the key still opens as many streams as its limit, all at once. Before the fix
the server's `http.disconnect` after a completed response cancelled the door's slot release about
half the time, and the key was refused every stream once its leaked slots reached the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from a2a.types import SendMessageRequest, StreamResponse, SubscribeToTaskRequest, TaskState, a2a_pb2_grpc

from apps.agents.services import workflow_fixtures_seed
from apps.tenants.models import Tenant
from tests.a2a.live import Session, live_card, reattached_until_done, send, user_message
from tests.live import start_grpc, start_web, wait_until

LIMIT = 2
ROUNDS = 3 * LIMIT  # completed streams per binding: more than the key may hold at once
APPROVAL = "conformance-approval"  # named: a message naming no skill runs echo (issue 53 item 6)


@pytest.fixture(scope="module")
def limited_host(_live_env, tmp_path_factory) -> Iterator[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(web base URL, gRPC address), both limiting a key to LIMIT open streams."""
    env, _ = _live_env
    env = {**env, "OPENWOP_MAX_STREAMS_PER_KEY": str(LIMIT)}
    log_dir = tmp_path_factory.mktemp("stream-slots")
    web, base_url = start_web(env, log_dir)
    grpc_live, address = start_grpc(env, log_dir)
    yield base_url, address
    grpc_live.stop()
    web.stop()


@pytest.fixture
def keys(limited_host, live_worker, make_key) -> dict[str, str]:  # type: ignore[no-untyped-def]
    made = {"acme": make_key("acme"), "globex": make_key("globex")}
    for slug in made:
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug=slug))
    return made


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _events_url(base: str, run_id: str) -> str:
    return f"{base}/runs/{run_id.replace('/', '~2F')}/events"


def _run(base: str, key: str, workflow: str) -> str:
    created = httpx.post(f"{base}/runs", json={"workflowId": workflow}, headers=_auth(key), timeout=30)
    assert created.status_code == 201, created.text
    return str(created.json()["runId"])


def _web_holds_limit(base: str, key: str, waiting_run: str) -> None:
    """LIMIT streams of the key at once, each answered 200 (none refused 429 for a leaked slot)."""
    with contextlib.ExitStack() as held:
        for _ in range(LIMIT):
            stream = held.enter_context(
                httpx.stream("GET", _events_url(base, waiting_run), headers=_auth(key), timeout=30)
            )
            assert stream.status_code == 200, stream.read()


# --- gRPC: the generated stub, as a gRPC client calls the service ---------------------------------


def _metadata(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"), ("a2a-version", "1.0"))


def _grpc_holds_limit(stub: Any, key: str, task_id: str) -> None:
    """LIMIT SubscribeToTask streams of the key at once on grpc_serve, each delivering its Task."""
    calls = [stub.SubscribeToTask(SubscribeToTaskRequest(id=task_id), metadata=_metadata(key), timeout=60)
             for _ in range(LIMIT)]  # fmt: skip
    try:
        for call in calls:
            first = next(call)
            assert first.HasField("task") and first.task.id == task_id
    finally:
        for call in calls:
            call.cancel()


def _grpc_rounds(address: str, key: str) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        for _ in range(ROUNDS):  # SendStreamingMessage to the task's end
            request = SendMessageRequest(message=user_message(prefix="slots", text="hi", skill="echo"))
            events = list(stub.SendStreamingMessage(request, metadata=_metadata(key), timeout=60))
            assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        for _ in range(ROUNDS):  # SubscribeToTask on a waiting task, answered, to its end
            asked = stub.SendMessage(
                SendMessageRequest(message=user_message(prefix="slots", text="approve?", skill=APPROVAL)),
                metadata=_metadata(key), timeout=60,
            )  # fmt: skip
            task_id = asked.task.id
            assert asked.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            stream = stub.SubscribeToTask(SubscribeToTaskRequest(id=task_id), metadata=_metadata(key), timeout=60)
            assert next(stream).task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            answer = user_message(prefix="slots", data={"action": "accept"}, task_id=task_id)
            stub.SendMessage(SendMessageRequest(message=answer), metadata=_metadata(key), timeout=60)
            rest: list[StreamResponse] = list(stream)
            assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        hold = SendMessageRequest(message=user_message(prefix="slots", text="hold", skill=APPROVAL))
        waiting = stub.SendMessage(hold, metadata=_metadata(key), timeout=60).task.id
        _grpc_holds_limit(stub, key, waiting)


# --- the HTTP bindings of A2A: the a2a-sdk client ---------------------------------------------------


async def _a2a_rounds(base: str, key: str, binding: str) -> None:
    session = Session(await live_card(base), binding, key)
    try:
        streaming, plain = session.client(streaming=True), session.client()
        for _ in range(ROUNDS):  # SendStreamingMessage to the task's end
            events = await send(streaming, user_message(prefix="slots", text="hi", skill="echo"))
            assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        for _ in range(ROUNDS):  # SubscribeToTask on a waiting task, answered, to its end
            asked = await send(plain, user_message(prefix="slots", text="approve?", skill=APPROVAL))
            task_id = asked[0].task.id
            answer = user_message(prefix="slots", data={"action": "accept"}, task_id=task_id)
            received = await reattached_until_done(streaming, plain, task_id, answer)
            assert received[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    finally:
        await session.close()


def test_finished_streams_give_back_their_slots(limited_host: tuple[str, str], keys: dict[str, str]) -> None:
    base, grpc_address = limited_host
    key = keys["acme"]
    waiting_run = _run(base, key, "conformance-approval")

    # REST SSE: a completed run's stream read to its end (the terminal event closes it).
    done_run = _run(base, key, "conformance-noop")
    wait_until(
        lambda: (
            httpx.get(f"{base}/runs/{done_run.replace('/', '~2F')}", headers=_auth(key)).json()["status"] == "completed"
        ),
        "the no-op run to complete",
    )
    for _ in range(ROUNDS):
        with httpx.stream("GET", _events_url(base, done_run), headers=_auth(key), timeout=30) as stream:
            assert stream.status_code == 200
            assert b"event: run.completed" in stream.read()
    _web_holds_limit(base, key, waiting_run)

    # /host/events (served by Django): the client leaves after the stream opened.
    for _ in range(ROUNDS):
        with httpx.stream("GET", f"{base}/host/events", headers=_auth(key), timeout=30) as stream:
            assert stream.status_code == 200
            assert next(stream.iter_lines()) == ": stream open"
    wait_until(lambda: _web_slots_free(base, key, waiting_run), "the host-event streams' slots to come back", 20)

    # A2A over JSON-RPC and HTTP+JSON: SendStreamingMessage and SubscribeToTask to the task's end.
    for binding in ("JSONRPC", "HTTP+JSON"):
        asyncio.run(_a2a_rounds(base, key, binding))
        _web_holds_limit(base, key, waiting_run)

    # A2A over gRPC (its own process): the same, then LIMIT streams at once there.
    _grpc_rounds(grpc_address, key)

    # Another tenant's key has slots of its own: acme holding its limit does not refuse globex.
    other = keys["globex"]
    theirs = _run(base, other, "conformance-approval")
    with contextlib.ExitStack() as held:
        for _ in range(LIMIT):
            held.enter_context(httpx.stream("GET", _events_url(base, waiting_run), headers=_auth(key), timeout=30))
        refused = httpx.get(_events_url(base, waiting_run), headers=_auth(key), timeout=30)
        assert refused.status_code == 429 and refused.json()["error"] == "rate_limited"
        with httpx.stream("GET", _events_url(base, theirs), headers=_auth(other), timeout=30) as stream:
            assert stream.status_code == 200
    # acme asking for globex's run is the unknown run's answer, and that refusal holds no slot.
    unknown = f"{theirs.split('/')[0]}/{'A' * 26}"
    foreign = httpx.get(_events_url(base, theirs), headers=_auth(key), timeout=30)
    assert foreign.status_code in (403, 404), foreign.text
    for _ in range(ROUNDS):
        assert httpx.get(_events_url(base, theirs), headers=_auth(key), timeout=30).status_code == foreign.status_code
    assert httpx.get(_events_url(base, unknown), headers=_auth(key), timeout=30).status_code in (403, 404)
    wait_until(lambda: _web_slots_free(base, key, waiting_run), "the key's slots after the refusals", 20)


def _web_slots_free(base: str, key: str, waiting_run: str) -> bool:
    """A client that leaves is seen by the server a moment later: poll until its slots are back."""
    try:
        _web_holds_limit(base, key, waiting_run)
    except AssertionError:
        return False
    return True
