"""A tenant user signs in to the console, creates an API key (shown once), starts a run with it,
registers a push config on the run in the console, watches the run's status change live (SSE) and
sees the push delivered to a real HTTPS receiver on loopback, with its attempts
(interop.md §A2A push delivery; webhooks.md §Egress: loopback is allowed for the test host only)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trustme

from apps.push.models import Delivery, DeliveryStatus
from apps.tenants.models import ApiKey
from tests.browser.conftest import screenshot
from tests.browser.roles import console_login, tenant_user
from tests.core.https_receivers import https_receiver
from tests.live import LiveProcess, wait_until

TOKEN = "console-push-token-7d1f"


def test_tenant_creates_a_key_and_a_push_config_and_sees_the_delivery(
    browser_host: tuple[str, LiveProcess], browser_ca: trustme.CA, page: Any, request: pytest.FixtureRequest
) -> None:
    base_url, worker = browser_host
    console_login(page, base_url, tenant_user("acme"))
    page.get_by_role("link", name="API keys").click()

    page.get_by_label("Label").fill("browser test key")
    page.get_by_role("button", name="Create key").click()
    raw_key = page.get_by_label("New API key").input_value()
    assert raw_key.startswith("owk_")
    screenshot(page, request, "key-created")
    assert page.url == f"{base_url}/console/keys/"  # POST-redirect-GET
    keys_before = ApiKey.unscoped_all_tenants.filter(tenant__slug="acme").count()
    page.reload()  # shown once, and a reload creates no second key
    assert page.get_by_label("New API key").count() == 0
    assert ApiKey.unscoped_all_tenants.filter(tenant__slug="acme").count() == keys_before
    assert raw_key not in page.content()

    with (
        https_receiver(browser_ca, "127.0.0.1") as receiver,
        httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {raw_key}"}, timeout=20) as api,
    ):
        created = api.post("/runs", json={"workflowId": "conformance-approval"})
        assert created.status_code == 201, created.text
        run_id = created.json()["runId"]
        wait_until(
            lambda: api.get(f"/runs/{run_id.replace('/', '~2F')}").json()["status"] == "waiting-approval",
            f"the run to wait for approval\n{worker.log()[-3000:]}",
        )

        page.get_by_role("link", name="Push & webhooks").click()
        page.get_by_label("Task (run) id").fill(run_id)
        page.get_by_label("Receiver URL (https)").fill(f"https://127.0.0.1:{receiver.port}/hook")
        page.get_by_label("Token (optional, sent as Bearer)").fill(TOKEN)
        page.get_by_role("button", name="Register").click()
        page.wait_for_url("**/console/push/tasks/**")
        assert "Push config" in page.locator(".messages").inner_text()

        page.get_by_role("link", name="Runs").click()
        status = page.locator("#runs .status").first
        assert status.inner_text() == "waiting-approval"
        resolved = api.post(
            f"/runs/{run_id.replace('/', '~2F')}/interrupts/approve", json={"resumeValue": {"action": "accept"}}
        )
        assert resolved.status_code == 200, resolved.text
        page.wait_for_function("document.querySelector('#runs .status').textContent === 'completed'")  # live, no reload
        screenshot(page, request, "run-completed-live")

        page.get_by_role("link", name="configs & deliveries").first.click()
        page.wait_for_function(  # the page refreshes its deliveries until none is pending
            """() => !document.querySelector('#task-deliveries .delivery[data-status="pending"]')
                && document.querySelectorAll('#task-deliveries .delivery[data-status="delivered"]').length === 2""",
            timeout=60_000,
        )
        rows = Delivery.unscoped_all_tenants.filter(run__run_id=run_id)
        assert sorted(r.event_type for r in rows) == ["interrupt.resolved", "run.completed"]
        assert all(r.status == DeliveryStatus.DELIVERED for r in rows)
        assert receiver.received, "the receiver got nothing"
        # Both deliveries may be in flight at once (a lane holds two), so they arrive in either order.
        assert all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in receiver.received)
        states = [json.loads(r.body)["statusUpdate"]["status"]["state"] for r in receiver.received]
        assert "TASK_STATE_COMPLETED" in states, states
        page.locator("#task-deliveries details summary").first.click()
        assert "HTTP 200" in page.locator("#task-deliveries .attempts").first.inner_text()
