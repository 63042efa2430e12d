"""The console where runs are worked (issue 53 item 4), in Debian's chromium against the live host:
a new run appears in the runs list without a reload; its page approves the open interrupt through
the run service; a run resolved through another door updates its page live from the run's stream;
every page fits a 390 px wide screen (tables scroll inside their box) and the dark scheme keeps
WCAG AA contrast."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from apps.runs.models import Interrupt, RunEvent
from apps.tenants.services import api_key_create, tenant_get_or_create
from tests.browser.conftest import screenshot
from tests.browser.roles import console_login, tenant_user
from tests.browser.test_keyboard import AUDIT
from tests.live import LiveProcess, wait_until

COMMENT = "<b>ship it</b>"


def _api(base_url: str) -> httpx.Client:
    _, raw = api_key_create(tenant=tenant_get_or_create(slug="acme")[0], label="browser")
    return httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {raw}"}, timeout=20)


def _started(api: httpx.Client, worker: LiveProcess, workflow_id: str, status: str, inputs: Any = None) -> str:
    created = api.post("/runs", json={"workflowId": workflow_id, **({"inputs": inputs} if inputs else {})})
    assert created.status_code == 201, created.text
    run_id: str = created.json()["runId"]
    wait_until(lambda: api.get(f"/runs/{run_id.replace('/', '~2F')}").json()["status"] == status,
               f"{workflow_id} to be {status}\n{worker.log()[-3000:]}")  # fmt: skip
    return run_id


def test_a_new_run_appears_and_is_approved_on_its_page(
    browser_host: tuple[str, LiveProcess], page: Any, request: pytest.FixtureRequest
) -> None:
    base_url, worker = browser_host
    account = tenant_user("acme")
    with _api(base_url) as api:
        console_login(page, base_url, account)
        page.get_by_role("link", name="Runs", exact=True).click()
        page.wait_for_url(f"{base_url}/console/runs/")
        page.evaluate("window.notReloaded = true")
        run_id = _started(api, worker, "conformance-approval", "waiting-approval")
        row = page.locator(f'#runs-rows tr[data-run-id="{run_id}"]')
        row.wait_for()  # polled in: no reload
        page.wait_for_function(f"""() => document.querySelector('#runs-rows tr[data-run-id="{run_id}"] .status')
            .textContent === 'waiting-approval'""")
        assert page.evaluate("window.notReloaded") is True
        screenshot(page, request, "new-run-arrived")

        row.get_by_role("link", name=run_id).click()
        page.wait_for_url(f"{base_url}/console/run/{run_id}")
        assert page.get_by_role("heading", name="Waiting: Approve the conformance run?").is_visible()
        screenshot(page, request, "run-waiting")
        page.get_by_label("Comment (optional)").fill(COMMENT)
        with page.expect_navigation():  # POST, then redirected back to the run's page
            page.get_by_role("button", name="Approve").click()
        assert page.url == f"{base_url}/console/run/{run_id}"
        assert "Approved: the run continues from its answer." in page.locator(".messages").inner_text()
        page.wait_for_function("document.getElementById('run-status').textContent === 'completed'")
        page.locator('#run-timeline li[data-type="run.completed"]').wait_for()
        assert COMMENT in page.locator("#run-outputs").inner_text()  # shown as text, never as markup
        assert page.locator("#run-outputs b").count() == 0
        screenshot(page, request, "run-approved")
        interrupt = Interrupt.unscoped_all_tenants.get(run__run_id=run_id)
        assert interrupt.resolution == {"action": "accept", "comment": COMMENT}

        # Resolved through another door (REST) while its page is open: the page follows the stream.
        other = _started(api, worker, "conformance-approval", "waiting-approval")
        page.goto(f"{base_url}/console/run/{other}")
        page.evaluate("window.notReloaded = true")
        rejected = api.post(
            f"/runs/{other.replace('/', '~2F')}/interrupts/approve", json={"resumeValue": {"action": "reject"}}
        )
        assert rejected.status_code == 200, rejected.text
        page.wait_for_function("document.getElementById('run-status').textContent === 'failed'")
        page.locator('#run-timeline li[data-type="run.failed"]').wait_for()
        assert page.locator("#open-interrupt").count() == 0 and page.evaluate("window.notReloaded") is True
        assert "approval_rejected" in page.locator("#run-error").inner_text()
        shown = page.locator("#run-timeline li").evaluate_all("items => items.map(i => i.dataset.type)")
        logged = list(
            RunEvent.unscoped_all_tenants.filter(run__run_id=other).order_by("sequence").values_list("type", flat=True)
        )
        assert shown == logged
        screenshot(page, request, "run-rejected-live")


NO_SIDEWAYS_SCROLL = """() => ({
  page: document.documentElement.scrollWidth, body: document.body.scrollWidth, viewport: window.innerWidth,
  boxes: [...document.querySelectorAll('.table-wrap')].map(b => getComputedStyle(b).overflowX),
})"""


# For a failure's message: which elements reach past the viewport's right edge.
PAST_THE_EDGE = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > window.innerWidth)
  .map(e => `${e.tagName}#${e.id}.${e.className} ${Math.round(e.getBoundingClientRect().right)}`).slice(0, 10)"""


def test_every_page_fits_390_px_and_the_dark_scheme_keeps_contrast(
    browser_host: tuple[str, LiveProcess], page: Any, request: pytest.FixtureRequest
) -> None:
    base_url, worker = browser_host
    account = tenant_user("acme")
    with _api(base_url) as api:
        wide = {"note": "x" * 400, "words": " ".join(["overflowing"] * 60)}
        echoed = _started(api, worker, "echo", "completed", wide)
        failed = _started(api, worker, "conformance-failure", "failed")
        waiting = _started(api, worker, "conformance-approval", "waiting-approval")
    page.set_viewport_size({"width": 390, "height": 844})
    console_login(page, base_url, account)
    runs = [*(f"/console/run/{run_id}" for run_id in (echoed, failed, waiting)), f"/console/push/tasks/{echoed}"]
    paths = ["/console/", "/console/runs/", *runs, "/console/push/", "/console/keys/", "/console/agents/"]
    for path in paths:
        page.goto(f"{base_url}{path}")
        measured = page.evaluate(NO_SIDEWAYS_SCROLL)
        assert measured["viewport"] == 390
        assert measured["page"] <= 390 and measured["body"] <= 390, (path, measured, page.evaluate(PAST_THE_EDGE))
        assert set(measured["boxes"]) <= {"auto"}, path  # a wide table scrolls inside its box
    page.goto(f"{base_url}/console/runs/")
    box = page.evaluate(
        "() => { const b = document.querySelector('#runs').parentElement; return [b.scrollWidth, b.clientWidth]; }"
    )
    assert box[0] > box[1]  # the table is wider than its box, which scrolls it
    screenshot(page, request, "runs-390")

    page.emulate_media(color_scheme="dark")
    for path in ("/console/", f"/console/run/{waiting}", f"/console/run/{echoed}", "/console/runs/", "/console/push/"):
        page.goto(f"{base_url}{path}")
        background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(21, 21, 21)", (path, background)
        assert page.evaluate(AUDIT) == {"poor": [], "unlabelled": []}, path
    screenshot(page, request, "run-dark")
    page.emulate_media(color_scheme="light")
    page.goto(f"{base_url}/console/run/{waiting}")
    assert page.evaluate("() => getComputedStyle(document.body).backgroundColor") == "rgb(255, 255, 255)"
    assert page.evaluate(AUDIT) == {"poor": [], "unlabelled": []}
