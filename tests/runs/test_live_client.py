"""Black-box: openwop-client (and raw httpx for SSE) against a live uvicorn and Celery worker."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from openwop_client import OpenwopClient
from openwop_client.errors import WopError
from openwop_client.types import CancelRunRequest, CreateRunRequest, ResolveInterruptRequest

from tests.live import wait_until
from tests.runs.wire_checks import assert_event_doc

TERMINAL = {"completed", "failed", "cancelled"}


@pytest.fixture
def api_key(live_url: str, live_worker, make_key) -> str:  # type: ignore[no-untyped-def]
    return make_key("acme")


@pytest.fixture
def client(live_url: str, api_key: str) -> OpenwopClient:
    return OpenwopClient(base_url=live_url, api_key=api_key, timeout=30)


def test_create_get_list_poll_and_stream_a_run(client: OpenwopClient) -> None:
    created = client.runs_create(CreateRunRequest(workflowId="echo", inputs={"greeting": "hi"}))
    assert created.runId.startswith("acme/") and created.status == "pending"
    assert created.eventsUrl == f"/runs/{created.runId.replace('/', '~2F')}/events"

    streamed = list(client.runs_events(created.runId, timeout_seconds=30))
    assert [e.type for e in streamed] == ["run.started", "node.started", "node.completed", "run.completed"]
    assert [e.sequence for e in streamed] == [1, 2, 3, 4]
    assert streamed[0].payload["transport"] == "rest"
    assert streamed[-1].payload == {"outputs": {"greeting": "hi"}}

    snapshot = client.runs_get(created.runId)
    assert snapshot.status == "completed" and snapshot.workflowId == "echo"
    assert (
        snapshot.owner.tenant == "acme"
        and streamed[0].payload["owner"]["subject"]["subjectId"] == snapshot.owner.subject.subjectId
    )

    polled = client.runs_poll_events(created.runId, after_sequence=2)
    assert [e.sequence for e in polled.events] == [3, 4]
    assert polled.lastSequence == 4 and polled.isTerminal and polled.status == "completed"

    listed = client.runs_list(workflow_id="echo", limit=10)
    assert listed is not None and created.runId in [r.runId for r in listed.runs]
    assert client.workflows_get("echo")["workflowId"] == "echo"


@pytest.mark.parametrize(
    ("workflow_id", "inputs", "status", "last_type"),
    [
        ("conformance-noop", None, "completed", "run.completed"),
        ("conformance-failure", None, "failed", "run.failed"),
        ("conformance-delay", {"delayMs": 200}, "completed", "run.completed"),
    ],
)
def test_fixture_outcomes_through_the_worker(
    client: OpenwopClient, workflow_id: str, inputs: dict | None, status: str, last_type: str
) -> None:
    run_id = client.runs_create(CreateRunRequest(workflowId=workflow_id, inputs=inputs)).runId
    events = list(client.runs_events(run_id, timeout_seconds=30))
    assert events[-1].type == last_type
    assert client.runs_get(run_id).status == status


def test_cancel_a_running_run_then_a_finished_one(client: OpenwopClient) -> None:
    run_id = client.runs_create(CreateRunRequest(workflowId="conformance-cancellable")).runId
    wait_until(lambda: client.runs_get(run_id).currentNodeId == "wait", "the worker to start the node")
    cancelled = client.runs_cancel(run_id, CancelRunRequest(reason="enough"))
    assert cancelled.status in ("cancelling", "cancelled")
    events = list(client.runs_events(run_id, timeout_seconds=30))
    assert events[-1].type == "run.cancelled" and events[-1].payload["reason"] == "enough"
    assert client.runs_get(run_id).status == "cancelled"
    with pytest.raises(WopError) as excinfo:
        client.runs_cancel(run_id)
    assert excinfo.value.status == 409 and excinfo.value.envelope.error == "run_terminal"


def test_two_concurrent_resolves_exactly_one_wins(client: OpenwopClient) -> None:
    run_id = client.runs_create(CreateRunRequest(workflowId="conformance-approval")).runId
    wait_until(lambda: client.runs_get(run_id).status == "waiting-approval", "the approval gate")
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def resolve() -> None:
        barrier.wait(timeout=10)
        try:
            client.interrupts_resolve_by_run(
                run_id, "approve", ResolveInterruptRequest(resumeValue={"action": "accept"})
            )
            outcomes.append("ok")
        except WopError as exc:
            outcomes.append(f"{exc.status} {exc.envelope.error if exc.envelope else ''}")

    threads = [threading.Thread(target=resolve) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["409 interrupt_already_resolved", "ok"]
    events = list(client.runs_events(run_id, timeout_seconds=30))
    assert [e.type for e in events].count("interrupt.resolved") == 1
    assert events[-1].type == "run.completed"


def test_idempotent_create_over_the_wire(client: OpenwopClient, live_url: str, api_key: str) -> None:
    first = client.runs_create(CreateRunRequest(workflowId="echo", inputs={"a": 1}), idempotency_key="live-key-1")
    again = client.runs_create(CreateRunRequest(workflowId="echo", inputs={"a": 1}), idempotency_key="live-key-1")
    assert again.runId == first.runId
    with pytest.raises(WopError) as excinfo:
        client.runs_create(CreateRunRequest(workflowId="echo", inputs={"a": 2}), idempotency_key="live-key-1")
    assert excinfo.value.status == 409 and excinfo.value.envelope.error == "idempotency_key_mismatch"
    headers = {"Authorization": f"Bearer {api_key}", "Idempotency-Key": "live-key-2"}
    body = {"workflowId": "echo"}
    original = httpx.post(f"{live_url}/runs", json=body, headers=headers)
    replay = httpx.post(f"{live_url}/runs", json=body, headers=headers)
    assert original.status_code == replay.status_code == 201
    assert "openwop-idempotent-replay" not in original.headers
    assert replay.headers["openwop-idempotent-replay"] == "true"
    assert replay.content == original.content
    # Let the worker finish both runs: teardown's flush must not race it for the run rows' locks.
    for run_id in (first.runId, original.json()["runId"]):
        wait_until(lambda run_id=run_id: client.runs_get(run_id).status == "completed", f"run {run_id} to complete")


def test_sse_resume_after_a_disconnect_loses_and_repeats_nothing(
    client: OpenwopClient, live_url: str, api_key: str
) -> None:
    headers = {"Authorization": f"Bearer {api_key}", "Accept": "text/event-stream"}
    run_id = client.runs_create(CreateRunRequest(workflowId="conformance-approval")).runId
    url = f"{live_url}/runs/{run_id.replace('/', '~2F')}/events"

    def read(extra: dict[str, str], stop_type: str) -> list[dict]:
        frames: list[dict] = []
        with httpx.stream("GET", url, headers={**headers, **extra}, timeout=30) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            frame: dict = {}
            for line in response.iter_lines():
                if line.startswith("id: "):
                    frame["id"] = int(line[4:])
                elif line.startswith("event: "):
                    frame["event"] = line[7:]
                elif line.startswith("data: "):
                    frame["data"] = json.loads(line[6:])
                elif line == "" and frame:
                    frames.append(frame)
                    if frame["event"] == stop_type:
                        return frames  # leaving the block drops the connection mid-stream
                    frame = {}
        return frames

    before = read({}, "node.suspended")
    assert [f["event"] for f in before] == ["run.started", "node.started", "interrupt.requested", "node.suspended"]
    client.interrupts_resolve_by_run(run_id, "approve", ResolveInterruptRequest(resumeValue={"action": "accept"}))
    after = read({"Last-Event-ID": str(before[-1]["id"])}, "run.completed")
    ids = [f["id"] for f in before + after]
    assert ids == list(range(1, len(ids) + 1))  # contiguous: nothing lost, nothing repeated
    assert after[-1]["event"] == "run.completed"
    for f in before + after:
        assert f["data"]["sequence"] == f["id"] and f["data"]["type"] == f["event"]
        assert_event_doc(f["data"])
    polled = client.runs_poll_events(run_id)
    assert [e.sequence for e in polled.events] == ids


@pytest.mark.parametrize("separator", ["~2F", "%2F"])
def test_both_id_encodings_reach_the_run_through_daphne(
    client: OpenwopClient, live_url: str, api_key: str, separator: str
) -> None:
    run_id = client.runs_create(CreateRunRequest(workflowId="conformance-noop")).runId
    headers = {"Authorization": f"Bearer {api_key}"}
    segment = run_id.replace("/", separator)
    response = httpx.get(f"{live_url}/runs/{segment}", headers=headers)
    assert response.status_code == 200 and response.json()["runId"] == run_id
    poll = httpx.get(f"{live_url}/runs/{segment}/events/poll?timeout=1", headers=headers)
    assert poll.status_code == 200 and poll.json()["runId"] == run_id
    # A dangling escape at the end (in the middle, `~2` + a random hex digit may form a valid one).
    dangling = httpx.get(f"{live_url}/runs/{run_id.replace('/', '~2F')}~2", headers=headers)
    assert dangling.status_code == 400 and dangling.json()["error"] == "validation_error"
