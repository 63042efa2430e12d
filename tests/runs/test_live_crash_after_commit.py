"""Crash safety of a one-transaction run (issue 18, DESIGN.md §The hot path): a web process killed
between the commit and the answer loses nothing. The run is complete in the database, and a retry
of the same request on a fresh server answers with it; exactly one run exists.

The first server runs with the test-only seam (tests/crash_after_commit_settings.py): it exits
(os._exit, no cleanup, as a SIGKILL would leave it) in the on-commit hook of the run's transaction,
so the client gets no answer at all. The retry goes to the session's ordinary live server.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from apps.a2a.models import TaskMessage
from apps.runs.models import Run, RunEvent, RunStatus
from apps.tenants.models import Tenant
from tests.a2a.conftest import user_message
from tests.live import start_web

pytestmark = pytest.mark.django_db(transaction=True)


def _send(http: httpx.Client, url: str, key: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    return http.post(f"{url}/a2a/jsonrpc", content=json.dumps(body), headers=headers)


@pytest.mark.parametrize("workflow_id", ["echo", "conformance-approval"])
def test_a_server_killed_after_the_commit_loses_nothing(
    live_env: Any, live_url: str, make_key: Any, workflow_id: str
) -> None:
    key = make_key("acme")
    message_id = f"crash-{workflow_id}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",  # blocking: the run is settled in the request's one transaction
        "params": {
            "message": user_message(
                message_id, text=None, data={"say": "hi"}, metadata={"openwop": {"skillId": workflow_id}}
            )
        },
    }
    env, var_dir = live_env
    crash_env = {**env, "DJANGO_SETTINGS_MODULE": "tests.crash_after_commit_settings"}
    crashing, crashing_url = start_web(crash_env, var_dir)
    try:
        with httpx.Client(timeout=60) as http, pytest.raises(httpx.HTTPError):
            _send(http, crashing_url, key, body)  # no answer: the process is gone
        assert crashing.proc.wait(timeout=30) == 70  # it died in the seam, after the commit
    finally:
        crashing.stop(kill=True)

    tenant = Tenant.objects.get(slug="acme")
    runs = list(Run.unscoped_all_tenants.filter(tenant=tenant))
    assert len(runs) == 1
    run = runs[0]
    settled = RunStatus.COMPLETED if workflow_id == "echo" else RunStatus.WAITING_APPROVAL
    assert run.status == settled  # the whole run committed, settled, before the crash
    events = list(RunEvent.unscoped_all_tenants.filter(run=run).order_by("sequence"))
    assert [e.sequence for e in events] == list(range(1, run.last_sequence + 1))
    assert TaskMessage.unscoped_all_tenants.filter(run=run, message_id=message_id).count() == 1

    # The client retries the same message on a healthy server: the same task, nothing new.
    with httpx.Client(timeout=60) as http:
        answer = _send(http, live_url, key, body).json()
    task = answer["result"]["task"]
    assert task["id"] == run.run_id
    expected = "TASK_STATE_COMPLETED" if workflow_id == "echo" else "TASK_STATE_INPUT_REQUIRED"
    assert task["status"]["state"] == expected
    assert Run.unscoped_all_tenants.filter(tenant=tenant).count() == 1
    assert RunEvent.unscoped_all_tenants.filter(run=run).count() == len(events)
