"""Event-stream positions as callers write them (issue 33 item 12), on a live uvicorn + worker.

`Last-Event-ID` and `afterSequence` are ASCII digits, at most a bigint's 19: a superscript `²`
(which `str.isdigit()` accepts), Arabic-Indic digits or 5,000 digits (past `int()`'s limit) are
the documented 400 `validation_error`, not a 500. A well-formed id past the log is an exclusive
cursor and is not refused (events.md §SSE frames); on a live run the stream it opens closes once
the run ends, as it would have at once on an ended run, instead of holding its slot forever.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.live import wait_until


@pytest.fixture
def keys(live_url: str, live_worker, make_key) -> dict[str, str]:  # type: ignore[no-untyped-def]
    from apps.agents.services import workflow_fixtures_seed
    from apps.tenants.models import Tenant

    made = {"acme": make_key("acme"), "globex": make_key("globex")}
    for slug in made:
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug=slug))
    return made


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _run(base: str, key: str, workflow: str) -> str:
    created = httpx.post(f"{base}/runs", json={"workflowId": workflow}, headers=_auth(key), timeout=30)
    assert created.status_code == 201, created.text
    return str(created.json()["runId"])


def _segment(run_id: str) -> str:
    return run_id.replace("/", "~2F")


# Header values as bytes: `²` goes on the wire as the one latin-1 byte a server decodes back to it.
MALFORMED_HEADERS = [b"\xb2", "١٢".encode(), b"1" * 5000, b"-1", b"1e3", b"0x10", b"12345678901234567890"]
MALFORMED_QUERY = ["²", "١٢", "1" * 5000, "-1", "1.5", "12345678901234567890"]


def test_malformed_positions_are_400_not_500(live_url: str, keys: dict[str, str]) -> None:
    key = keys["acme"]
    run_id = _run(live_url, key, "conformance-noop")
    wait_until(
        lambda: httpx.get(f"{live_url}/runs/{_segment(run_id)}", headers=_auth(key)).json()["status"] == "completed",
        "the run to complete",
    )
    events = f"{live_url}/runs/{_segment(run_id)}/events"
    for raw in MALFORMED_HEADERS:
        answer = httpx.get(events, headers={**_auth(key), "Last-Event-ID": raw}, timeout=30)
        assert answer.status_code == 400, (raw[:20], answer.status_code, answer.text[:200])
        assert answer.json()["error"] == "validation_error"
        assert answer.json()["details"]["field"] == "Last-Event-ID"
    poll = f"{live_url}/runs/{_segment(run_id)}/events/poll"
    for name in ("afterSequence", "timeout"):
        for raw_value in MALFORMED_QUERY:
            answer = httpx.get(poll, params={"timeout": "1", name: raw_value}, headers=_auth(key), timeout=30)
            assert answer.status_code == 400, (name, raw_value[:20], answer.status_code, answer.text[:200])
            assert answer.json()["error"] == "validation_error" and answer.json()["details"]["field"] == name

    # Well-formed ids are cursors: one past the log of an ended run (even past a bigint, 19 digits)
    # closes at once with nothing; the poll answers nothing after it.
    for raw in (b"4", b"1000", b"9999999999999999999"):
        with httpx.stream("GET", events, headers={**_auth(key), "Last-Event-ID": raw}, timeout=30) as stream:
            assert stream.status_code == 200
            assert b"data:" not in stream.read()
    polled = httpx.get(poll, params={"afterSequence": "9999999999999999999", "timeout": "1"}, headers=_auth(key))
    assert polled.status_code == 200 and polled.json()["events"] == [] and polled.json()["isTerminal"]

    # Another tenant's key learns nothing from a malformed id: the run is checked first, and the
    # answer is the unknown run's, byte for byte.
    other = keys["globex"]
    unknown = f"{run_id.split('/')[0]}/{'A' * 26}"
    malformed = {**_auth(other), "Last-Event-ID": b"\xb2"}
    foreign = httpx.get(f"{live_url}/runs/{_segment(run_id)}/events", headers=malformed)
    absent = httpx.get(f"{live_url}/runs/{_segment(unknown)}/events", headers=malformed)
    assert foreign.status_code in (403, 404)
    assert (foreign.status_code, foreign.json()["error"]) == (absent.status_code, absent.json()["error"])


def test_a_cursor_past_the_log_of_a_live_run_closes_when_the_run_ends(live_url: str, keys: dict[str, str]) -> None:
    key = keys["acme"]
    run_id = _run(live_url, key, "conformance-approval")
    base = f"{live_url}/runs/{_segment(run_id)}"
    wait_until(
        lambda: httpx.get(base, headers=_auth(key)).json()["status"] == "waiting-approval",
        "the run to wait for its approval",
    )
    lines: list[str] = []
    deadline = time.monotonic() + 60  # generous: the heartbeat (15 s) gives the loop a turn
    with httpx.stream("GET", f"{base}/events", headers={**_auth(key), "Last-Event-ID": "1000"}, timeout=30) as stream:
        assert stream.status_code == 200
        resolved = httpx.post(
            f"{base}/interrupts/approve", json={"resumeValue": {"action": "accept"}}, headers=_auth(key), timeout=30
        )
        assert resolved.status_code in (200, 202), resolved.text
        for line in stream.iter_lines():
            lines.append(line)
            assert time.monotonic() < deadline, "the stream past the log stayed open after the run ended"
    assert httpx.get(base, headers=_auth(key)).json()["status"] == "completed"
    assert not [line for line in lines if line.startswith(("data:", "id:"))]  # nothing at or before the cursor
