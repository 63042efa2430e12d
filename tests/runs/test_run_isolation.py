"""Isolation on every run endpoint (runs.md §Identity; STYLE.md habit 13).

A run id whose tenant segment is not the caller's is 403 id_tenant_mismatch, with the same body
whether or not such a run exists; an unknown id of the caller's own tenant is 404 not_found.
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync

from tests.envelope import assert_envelope
from tests.runs.conftest import Caller, advance

pytestmark = pytest.mark.django_db

UNKNOWN_OPAQUE = "Zz" * 13

ENDPOINTS = [
    ("GET", "/runs/{}", None),
    ("POST", "/runs/{}/cancel", {}),
    ("GET", "/runs/{}/events/poll?timeout=1", None),
    ("GET", "/runs/{}/events", None),
    ("POST", "/runs/{}/interrupts/approve", {"resumeValue": {"action": "accept"}}),
]


def _call(caller: Caller, method: str, template: str, body: object, run_id: str):  # type: ignore[no-untyped-def]
    path = template.format(run_id.replace("/", "~2F"))
    return caller.get(path) if method == "GET" else caller.post(path, body)


@pytest.mark.parametrize(("method", "template", "body"), ENDPOINTS)
def test_foreign_run_is_403_whether_or_not_it_exists(
    acme: Caller, globex: Caller, method: str, template: str, body: object
) -> None:
    theirs = globex.create_run("conformance-approval")
    advance(theirs)
    existing = _call(acme, method, template, body, theirs)
    missing = _call(acme, method, template, body, f"globex/{UNKNOWN_OPAQUE}")
    nobody = _call(acme, method, template, body, f"no-such-tenant/{UNKNOWN_OPAQUE}")
    assert_envelope(existing, "id_tenant_mismatch", 403)
    assert existing.content == missing.content == nobody.content
    # ...and nothing happened to the foreign run.
    assert globex.get(f"/runs/{theirs.replace('/', '~2F')}").json()["status"] == "waiting-approval"


@pytest.mark.parametrize(("method", "template", "body"), ENDPOINTS)
def test_unknown_run_of_own_tenant_is_404(acme: Caller, method: str, template: str, body: object) -> None:
    assert_envelope(_call(acme, method, template, body, f"acme/{UNKNOWN_OPAQUE}"), "not_found", 404)


@pytest.mark.parametrize(("method", "template", "body"), ENDPOINTS)
def test_unauthenticated_is_401(client, method: str, template: str, body: object) -> None:  # type: ignore[no-untyped-def]
    path = template.format(f"acme~2F{UNKNOWN_OPAQUE}")
    response = (
        client.get(path)
        if method == "GET"
        else client.post(path, data=json.dumps(body), content_type="application/json")
    )
    assert_envelope(response, "unauthenticated", 401)


@pytest.mark.parametrize(
    "encode", [lambda r: r.replace("/", "~2F"), lambda r: r.replace("/", "%2F"), lambda r: r.replace("/", "%2f")]
)
def test_projected_and_percent_encoded_ids_are_both_accepted(acme: Caller, encode) -> None:  # type: ignore[no-untyped-def]
    run_id = acme.create_run("conformance-noop")
    assert acme.get(f"/runs/{encode(run_id)}").json()["runId"] == run_id
    poll = acme.get(f"/runs/{encode(run_id)}/events/poll?timeout=1")
    assert poll.status_code == 200 and poll.json()["runId"] == run_id
    assert acme.post(f"/runs/{encode(run_id)}/cancel").json() == {"runId": run_id, "status": "cancelled"}


@pytest.mark.parametrize("segment", ["acme~2", "acme~2Fabc~", "acme~ZZ" + UNKNOWN_OPAQUE, "acme%2" + UNKNOWN_OPAQUE])
def test_a_dangling_escape_is_validation_error(acme: Caller, segment: str) -> None:
    assert_envelope(acme.get(f"/runs/{segment}"), "validation_error", 400)
    assert_envelope(acme.get(f"/runs/{segment}/events/poll"), "validation_error", 400)


def test_a_bare_id_is_validation_error(acme: Caller) -> None:
    assert_envelope(acme.get(f"/runs/{UNKNOWN_OPAQUE}"), "validation_error", 400)


def test_sse_refuses_an_unserved_stream_mode_before_streaming(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    response = acme.get(f"/runs/{run_id.replace('/', '~2F')}/events?streamMode=values")
    assert response.status_code == 400
    body = json.loads(response.content)
    assert body["error"] == "unsupported_stream_mode"
    assert body["details"] == {"supported": ["updates", "debug"]}


def _body(response) -> bytes:  # type: ignore[no-untyped-def]
    async def collect() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(collect)()


def test_sse_of_a_finished_run_replays_to_the_terminal_event(acme: Caller) -> None:
    run_id = acme.create_run("conformance-noop")
    advance(run_id)
    response = acme.get(f"/runs/{run_id.replace('/', '~2F')}/events", **{"Last-Event-ID": "2"})
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/event-stream"
    text = _body(response).decode()
    ids = [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]
    assert ids == [3, 4]
    assert "event: run.completed" in text
    # A caller who already holds the terminal event gets a stream that closes with nothing.
    done = acme.get(f"/runs/{run_id.replace('/', '~2F')}/events", **{"Last-Event-ID": "4"})
    assert _body(done) == b""
