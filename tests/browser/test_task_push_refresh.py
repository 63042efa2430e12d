"""A task's console push page refreshes its deliveries only while they can still change (issue 32
item 10): a finished task's page is never refetched (it used to reload itself for ~90 s), and a
running task's page refreshes until the task ends, then stops."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from apps.tenants.services import api_key_create, tenant_get_or_create
from tests.browser.conftest import screenshot
from tests.browser.roles import console_login, tenant_user
from tests.live import LiveProcess, wait_until

SETTLED = '#task-deliveries[data-refresh-state="settled"]'


def _page_fetches(page: Any, url: str) -> list[str]:
    """Every request the page's script makes for `url` (the refresh), recorded from now on."""
    fetches: list[str] = []
    page.on("request", lambda r: fetches.append(r.url) if r.url == url and r.resource_type == "fetch" else None)
    return fetches


def test_a_finished_tasks_page_is_not_refetched_and_a_running_one_stops_when_it_ends(
    browser_host: tuple[str, LiveProcess], page: Any, request: pytest.FixtureRequest
) -> None:
    base_url, worker = browser_host
    account = tenant_user("acme")
    _, raw = api_key_create(tenant=tenant_get_or_create(slug="acme")[0], label="refresh")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {raw}"}, timeout=20) as api:

        def run(workflow_id: str, status: str) -> str:
            created = api.post("/runs", json={"workflowId": workflow_id})
            assert created.status_code == 201, created.text
            run_id: str = created.json()["runId"]
            wait_until(lambda: api.get(f"/runs/{run_id.replace('/', '~2F')}").json()["status"] == status,
                       f"{workflow_id} to be {status}\n{worker.log()[-3000:]}")  # fmt: skip
            return run_id

        failed = run("conformance-failure", "failed")
        waiting = run("conformance-approval", "waiting-approval")
        console_login(page, base_url, account)

        url = f"{base_url}/console/push/tasks/{failed}"
        fetches = _page_fetches(page, url)
        page.goto(url)
        page.wait_for_selector(SETTLED, state="attached")
        page.wait_for_timeout(2500)  # past the first refresh the old script scheduled (1 s)
        assert fetches == []
        assert "Reason:" in page.locator(".run-reason").inner_text()

        url = f"{base_url}/console/push/tasks/{waiting}"
        fetches = _page_fetches(page, url)
        page.goto(url)
        page.wait_for_event("request", lambda r: r.url == url and r.resource_type == "fetch")  # refreshing
        assert page.locator(SETTLED).count() == 0
        cancelled = api.post(f"/runs/{waiting.replace('/', '~2F')}/cancel", json={})
        assert cancelled.status_code == 200, cancelled.text
        page.wait_for_selector(SETTLED, state="attached")
        count = len(fetches)
        page.wait_for_timeout(2500)
        assert len(fetches) == count  # stopped once the task ended
        screenshot(page, request, "settled")
