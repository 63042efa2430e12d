"""Hostile JSON-RPC against the A2A and MCP doors, in-process through the whole middleware stack
(tests/hardening/hostile.py has the generators and the properties). A few hundred derandomized
cases per door here; `make fuzz` runs FUZZ_EXAMPLES (10,000) random ones per door. They run on
PostgreSQL, whose text, jsonb and varchar columns refuse NUL and over-long strings (issue 33 items
10, 11): the doors must refuse them first."""

from __future__ import annotations

from collections import Counter
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from django.db import connection
from hypothesis import given, note
from hypothesis import strategies as st

from tests.door_client import DoorClient
from tests.hardening.hostile import (
    FUZZ_EXAMPLES,
    Case,
    a2a_cases,
    assert_protocol_answer,
    authorization,
    fuzz_settings,
    is_refusal,
    mcp_cases,
    state_counts,
    weird_text,
)

# Committed transactions, with the executor run inline on commit: a tools/call or a blocking
# SendMessage then gets its answer in-process instead of waiting for a worker that is not there.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def sent_advances(monkeypatch):  # type: ignore[no-untyped-def]
    from apps.runs import tasks
    from apps.runs.engine import run_advance

    monkeypatch.setattr(tasks.advance, "apply_async", lambda args, queue: run_advance(run_id=args[0], worker="fuzz"))


task_refs = st.one_of(
    st.sampled_from(["acme~2F0123456789abcdefghijklmn", "globex~2F0123456789abcdefghijklmn", "x", "~", "%2F"]),
    weird_text.filter(lambda t: "\x00" not in t and "\n" not in t and "\r" not in t and "?" not in t and "#" not in t),
)
a2a_paths = st.one_of(
    st.sampled_from(["/a2a/jsonrpc", "/a2a/jsonrpc/"] * 4),
    st.sampled_from(
        [
            "/a2a/rest/message:send",
            "/a2a/rest/message:stream",
            "/a2a/rest/tasks",
            "/a2a/rest/extendedAgentCard",
            "/a2a/nowhere",
            "/a2a",
        ]
    ),
    st.builds(
        lambda ref, suffix: f"/a2a/rest/tasks/{ref}{suffix}",
        task_refs,
        st.sampled_from(["", ":cancel", ":subscribe", "/pushNotificationConfigs", "/pushNotificationConfigs/x"]),
    ),
)


def _send(client: DoorClient, path: str, case: Case, key: str) -> Any:
    note(repr(case))
    path = quote(path.encode("utf-8", "surrogatepass"), safe="/:~%")  # what arrives on the wire
    headers = {**case.headers, **authorization(case, key)}
    content_type = headers.pop("Content-Type")
    return client.generic(case.http_method, path, data=case.body, content_type=content_type, headers=headers)


def _check(response: Any, before: tuple[int, int, int], seen: Counter[int]) -> None:
    seen[response.status_code] += 1
    streaming = response.streaming
    content = b"" if streaming else response.content
    body = assert_protocol_answer(response.status_code, response.get("Content-Type", ""), content)
    assert "OpenWOP-Version" not in response.headers
    if is_refusal(response.status_code, body):
        assert state_counts() == before, (response.status_code, body)


def _report(door: str, seen: Counter[int]) -> None:
    # On PostgreSQL (CI) a NUL or an over-long string reaches a real text/varchar column (issue 33).
    print(f"fuzz {door} on {connection.vendor}: {sum(seen.values())} requests, statuses {dict(sorted(seen.items()))}")
    assert sum(seen.values()) >= min(FUZZ_EXAMPLES or 300, 300) * 0.9  # hypothesis really ran the cases
    assert any(status < 300 for status in seen) and any(status >= 400 for status in seen)  # both kinds reached


@pytest.fixture
def fuzz_key(door_for) -> str:  # type: ignore[no-untyped-def]
    door_for("globex")
    return door_for("acme").key


def test_hostile_requests_on_the_a2a_door(fuzz_key: str, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RATE_LIMIT_REQUESTS = 0  # thousands of requests on one key: the ceiling is not under test
    client, seen = DoorClient(leave_open_streams=True), Counter[int]()

    @fuzz_settings(300)
    @given(case=a2a_cases, path=a2a_paths)
    def property_(case: Case, path: str) -> None:
        before = state_counts()
        _check(_send(client, path, case, fuzz_key), before, seen)

    property_()
    _report("a2a", seen)


def test_hostile_requests_on_the_mcp_door(fuzz_key: str, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_RATE_LIMIT_REQUESTS = 0
    client, seen = DoorClient(leave_open_streams=True), Counter[int]()

    @fuzz_settings(300)
    @given(case=mcp_cases)
    def property_(case: Case) -> None:
        before = state_counts()
        _check(_send(client, "/mcp", case, fuzz_key), before, seen)

    property_()
    _report("mcp", seen)


def test_hostile_requests_over_raw_http(live_url: str, live_worker, door_for) -> None:  # type: ignore[no-untyped-def]
    """The same cases over a real socket to uvicorn (its own header and body parsing in front of
    Django), with a real worker so started runs progress; a smaller sample."""
    key = door_for("acme").key
    seen = Counter[int]()

    def send(client: httpx.Client, path: str, case: Case) -> None:
        note(repr(case))
        headers = {**case.headers, **authorization(case, key)}
        before = state_counts()
        try:
            response = client.request(
                case.http_method,
                quote(path.encode("utf-8", "surrogatepass"), safe="/:~%"),
                content=case.body,
                headers=headers,
            )
        except httpx.ReadTimeout:  # a stream that stays open (SendStreamingMessage) is not an answer to judge
            return
        except httpx.LocalProtocolError:  # a header value the client itself will not put on the wire
            return
        seen[response.status_code] += 1
        streaming = response.headers.get("content-type", "").startswith("text/event-stream")
        body = assert_protocol_answer(
            response.status_code, response.headers.get("content-type", ""), b"" if streaming else response.content
        )
        assert "openwop-version" not in response.headers
        if is_refusal(response.status_code, body):
            assert state_counts() == before, (response.status_code, body)

    with httpx.Client(base_url=live_url, timeout=httpx.Timeout(20, read=5)) as client:

        @fuzz_settings(60, fuzz_cap=1000)  # over a socket with a worker: ~10x slower per case
        @given(case=a2a_cases, path=a2a_paths)
        def a2a(case: Case, path: str) -> None:
            send(client, path, case)

        @fuzz_settings(60, fuzz_cap=1000)
        @given(case=mcp_cases)
        def mcp(case: Case) -> None:
            send(client, "/mcp", case)

        a2a()
        mcp()
    print(f"fuzz raw http: {sum(seen.values())} requests, statuses {dict(sorted(seen.items()))}")
    assert sum(seen.values()) >= 100 and any(status < 300 for status in seen)
