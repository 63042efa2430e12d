"""An open stream ends once its credential is revoked (issue 33 item 6), on a real uvicorn and
`grpc_serve` started with OPENWOP_STREAM_RECHECK_SECONDS=0.5.

One API key opens every kind of stream on runs that wait (an approval, a long cancellable task):
REST SSE `/runs/{id}/events`, `/host/events`, A2A SubscribeToTask and SendStreamingMessage over
JSON-RPC and HTTP+JSON (a2a-sdk) and gRPC (the generated stub), and a console user's run stream
(signed in through the login form). The key is revoked through the service and the user signs out:
every one of those streams ends (bounded by a generous timeout, no timing assert), gRPC with
UNAUTHENTICATED, and none of them delivers the run's later events. Another key of the same tenant
and another tenant's key keep streaming. Before, they were authorized once and streamed on.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx
import pytest
from a2a.types import (
    CancelTaskRequest,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
    a2a_pb2_grpc,
)

from apps.agents.services import workflow_fixtures_seed
from apps.tenants.models import ApiKey, Tenant
from apps.tenants.services import api_key_revoke
from tests.a2a.live import Session, db_read, live_card, only_task, user_message
from tests.browser.roles import PASSWORD, tenant_user
from tests.live import start_grpc, start_web

ENDS_WITHIN = 60.0  # generous: the streams re-check every 0.5 s


@pytest.fixture(scope="module")
def rechecking_host(_live_env, tmp_path_factory) -> Iterator[tuple[str, str]]:  # type: ignore[no-untyped-def]
    env, _ = _live_env
    env = {**env, "OPENWOP_STREAM_RECHECK_SECONDS": "0.5"}
    log_dir = tmp_path_factory.mktemp("stream-recheck")
    web, base_url = start_web(env, log_dir)
    grpc_live, address = start_grpc(env, log_dir)
    yield base_url, address
    grpc_live.stop()
    web.stop()


@pytest.fixture
def keys(rechecking_host, live_worker, make_key) -> dict[str, str]:  # type: ignore[no-untyped-def]
    made = {"revoked": make_key("acme"), "kept": make_key("acme"), "globex": make_key("globex")}
    for slug in ("acme", "globex"):
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug=slug))
    return made


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _metadata(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"), ("a2a-version", "1.0"))


@dataclass
class Reader:
    """One open stream, read by a task of its own: what it received, and how it ended."""

    name: str
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    received: list[Any] = field(default_factory=list)
    error: BaseException | None = None
    task: asyncio.Task[None] | None = None

    def start(self, items: Callable[[], AsyncIterator[Any]]) -> Reader:
        async def read() -> None:
            try:
                async for item in items():
                    self.received.append(item)
                    self.opened.set()
            except (grpc.aio.AioRpcError, httpx.HTTPError, Exception) as exc:  # how the stream ended
                self.error = exc
            finally:
                self.opened.set()

        self.task = asyncio.get_running_loop().create_task(read())
        return self


async def _sse_lines(http: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> AsyncIterator[str]:
    async with http.stream(method, url, **kwargs) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            yield line


async def _console_client(base: str) -> httpx.AsyncClient:
    """A browser's session: the login form, its CSRF token and cookie, posted as a form. (The live
    host's cookies are `Secure`; a browser on this plain-http loopback would hold them as the jar
    here is told to.)"""
    account = await db_read(lambda: tenant_user("acme", username="stream-watcher"))
    http = httpx.AsyncClient(base_url=base, timeout=30)
    form = await http.get("/console/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert token is not None
    _keep_cookies(http, form)
    signed_in = await http.post(
        "/console/login/",
        data={"username": account.username, "password": PASSWORD, "csrfmiddlewaretoken": token[1]},
        headers={"Referer": f"{base}/console/login/"},
    )
    assert signed_in.status_code == 302 and "/console/" in signed_in.headers["location"], signed_in.text[:300]
    _keep_cookies(http, signed_in)
    return http


def _keep_cookies(http: httpx.AsyncClient, response: httpx.Response) -> None:
    plain = {cookie.name: cookie.value for cookie in http.cookies.jar if not cookie.secure}
    plain.update({cookie.name: cookie.value for cookie in response.cookies.jar})
    http.cookies = httpx.Cookies(plain)


def _csrf(http: httpx.AsyncClient) -> str:
    return next(c.value or "" for c in http.cookies.jar if c.name == "csrftoken" and not c.secure)


async def _until(what: str, check: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(int(ENDS_WITHIN * 10)):
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def test_revoked_and_signed_out_streams_end(rechecking_host: tuple[str, str], keys: dict[str, str]) -> None:
    base, grpc_address = rechecking_host
    revoked, kept, globex = keys["revoked"], keys["kept"], keys["globex"]
    http = httpx.AsyncClient(timeout=httpx.Timeout(30, read=ENDS_WITHIN))
    card = await live_card(base)
    sessions = {binding: Session(card, binding, revoked) for binding in ("JSONRPC", "HTTP+JSON")}
    channel = grpc.aio.insecure_channel(grpc_address)
    stub = a2a_pb2_grpc.A2AServiceStub(channel)
    console = await _console_client(base)
    readers: list[Reader] = []  # the streams that must end
    others: list[Reader] = []  # the streams that must not
    try:
        # A run that waits for its approval, and an A2A task that does.
        created = await http.post(f"{base}/runs", json={"workflowId": "conformance-approval"}, headers=_auth(revoked))
        run_id = created.json()["runId"]
        run_events = f"{base}/runs/{run_id.replace('/', '~2F')}/events"
        plain = sessions["JSONRPC"].client()
        waiting = await only_task(plain, user_message(prefix="revoke", text="approve?", skill="conformance-approval"))
        assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED

        def long_task() -> SendMessageRequest:
            message = user_message(prefix="revoke", data={"waitMs": 120000}, skill="conformance-cancellable")
            return SendMessageRequest(message=message)

        readers.append(Reader("rest sse").start(lambda: _sse_lines(http, "GET", run_events, headers=_auth(revoked))))
        readers.append(
            Reader("host events").start(lambda: _sse_lines(http, "GET", f"{base}/host/events", headers=_auth(revoked)))
        )
        for binding, session in sessions.items():
            streaming = session.client(streaming=True)
            readers.append(
                Reader(f"{binding} subscribe").start(
                    lambda streaming=streaming: streaming.subscribe(SubscribeToTaskRequest(id=waiting.id))
                )
            )
            readers.append(
                Reader(f"{binding} streaming send").start(
                    lambda streaming=streaming: streaming.send_message(long_task())
                )
            )
        readers.append(
            Reader("grpc subscribe").start(
                lambda: stub.SubscribeToTask(SubscribeToTaskRequest(id=waiting.id), metadata=_metadata(revoked))
            )
        )
        readers.append(
            Reader("grpc streaming send").start(
                lambda: stub.SendStreamingMessage(long_task(), metadata=_metadata(revoked))
            )
        )
        readers.append(Reader("console").start(lambda: _sse_lines(console, "GET", f"/console/runs/status/{run_id}")))
        # Streams that must go on: another key of the tenant, and another tenant's key.
        kept_reader = Reader("kept key").start(lambda: _sse_lines(http, "GET", run_events, headers=_auth(kept)))
        theirs = (await http.post(
            f"{base}/runs", json={"workflowId": "conformance-approval"}, headers=_auth(globex)
        )).json()["runId"]  # fmt: skip
        globex_reader = Reader("globex").start(
            lambda: _sse_lines(http, "GET", f"{base}/runs/{theirs.replace('/', '~2F')}/events", headers=_auth(globex))
        )
        others += [kept_reader, globex_reader]
        everyone = [*readers, *others]
        await asyncio.wait_for(asyncio.gather(*(r.opened.wait() for r in everyone)), ENDS_WITHIN)
        assert all(r.error is None and r.received for r in everyone), [(r.name, r.error) for r in everyone]

        # Revoke the key (the service, as the console and the admin do), and sign the user out.
        prefix = revoked.split("_", 1)[1].split(".")[0]
        await db_read(lambda: api_key_revoke(api_key=ApiKey.unscoped_all_tenants.get(prefix=prefix)))
        assert (await http.get(f"{base}/runs", headers=_auth(revoked))).status_code == 401
        signed_out = await console.post("/console/logout/", headers={"X-CSRFToken": _csrf(console)})
        assert signed_out.status_code == 302

        async def all_ended() -> bool:
            return all(r.task is not None and r.task.done() for r in readers)

        await _until("every revoked or signed-out stream to end", all_ended)
        seen = {r.name: len(r.received) for r in readers}
        grpc_errors = [r.error for r in readers if r.name.startswith("grpc")]
        assert all(
            isinstance(e, grpc.aio.AioRpcError) and e.code() == grpc.StatusCode.UNAUTHENTICATED for e in grpc_errors
        ), grpc_errors
        assert not kept_reader.task.done() and not globex_reader.task.done()  # type: ignore[union-attr]

        # The run goes on (answered with the other key): its events reach the kept stream only.
        run_url = run_events.removesuffix("/events")

        async def run_waits() -> bool:  # the worker may still be on its way to the approval node
            return str((await http.get(run_url, headers=_auth(kept))).json().get("status", "")).startswith("waiting")

        await _until("the run to wait for its approval", run_waits)
        resolved = await http.post(
            f"{run_events.removesuffix('/events')}/interrupts/approve",
            json={"resumeValue": {"action": "accept"}}, headers=_auth(kept),
        )  # fmt: skip
        assert resolved.status_code in (200, 202), resolved.text
        await asyncio.wait_for(kept_reader.task, ENDS_WITHIN)  # type: ignore[arg-type]
        assert "event: run.completed" in kept_reader.received
        assert {r.name: len(r.received) for r in readers} == seen  # nothing after they ended
        for reader in readers:
            assert not any("run.completed" in str(item) for item in reader.received), reader.name
        assert not globex_reader.task.done()  # type: ignore[union-attr]
    finally:
        for reader in readers + others:
            if reader.task is not None:
                reader.task.cancel()
                await asyncio.gather(reader.task, return_exceptions=True)
        await channel.close()
        for session in sessions.values():
            await session.close()
        await console.aclose()
        await http.aclose()
        await _cancel_long_tasks(card, kept, readers)


async def _cancel_long_tasks(card: Any, key: str, readers: list[Reader]) -> None:
    """Leave no two-minute task running into the next test's flush: cancel them with the kept key."""
    session = Session(card, "JSONRPC", key)
    try:
        client = session.client()
        for reader in readers:
            first = reader.received[0] if reader.received else None
            if "streaming send" in reader.name and isinstance(first, StreamResponse) and first.HasField("task"):
                await client.cancel_task(CancelTaskRequest(id=first.task.id))
    finally:
        await session.close()
