"""Browser tests: Playwright's sync API driving Debian's chromium against a live host.

The host is a private uvicorn + Celery worker pair (started once per xdist worker for this package,
and stopped after its last test, so it does not keep polling the database under other tests) whose
egress guard allows loopback and trusts a test CA, so a push can reach an HTTPS receiver on
127.0.0.1 (webhooks.md §Egress stays on everywhere else). Each test saves a screenshot under
var/test-artifacts/<test name>/ (not committed).

Chromium is Debian's (`apt-get install chromium`), never a Playwright download. Without it the
tests skip locally, saying why, and fail in CI (`OPENWOP_REQUIRE_BROWSER=1`, set by .ci/run).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.live import LiveProcess, start_celery_worker, start_web

CHROMIUM = Path(os.environ.get("OPENWOP_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "var" / "test-artifacts"


def _chromium_or_skip() -> None:
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium) for the browser tests"
    if os.environ.get("OPENWOP_REQUIRE_BROWSER") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="package")
def _browser_host(
    live_env: Any, browser_ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, LiveProcess]]:
    _chromium_or_skip()  # before starting anything
    env, var_dir = live_env
    bundle = tmp_path_factory.mktemp("browser-ca") / "ca.pem"
    browser_ca.cert_pem.write_to_path(str(bundle))
    own_env = {
        **env,
        "OPENWOP_CELERY_QUEUE": f"{env['OPENWOP_CELERY_QUEUE']}-browser",
        "OPENWOP_EGRESS_ALLOW_CIDRS": "127.0.0.0/8",  # for these processes only
        "OPENWOP_EGRESS_CA_BUNDLE": str(bundle),
        "OPENWOP_PUSH_ATTEMPT_TIMEOUT": "3",
    }
    web, base_url = start_web(own_env, var_dir)
    worker = start_celery_worker(own_env, var_dir, name="browser")
    yield base_url, worker
    worker.stop()
    web.stop()


@pytest.fixture
def browser_host(_browser_host: tuple[str, LiveProcess], transactional_db: None) -> tuple[str, LiveProcess]:
    """(base URL, worker) of the live host the browser talks to, on this test's committed data."""
    return _browser_host


@pytest.fixture
def page(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A fresh Playwright + chromium + page per test; a screenshot of the last state is saved.

    Playwright's sync API keeps an asyncio loop running on this thread while it is started, which
    would break every later async test (and Django's async guard) in this xdist worker: so it lives
    exactly as long as the test. During the test the test's own synchronous ORM reads are safe, so
    Django's async guard is relaxed for it only (Playwright docs, "Django").
    """
    _chromium_or_skip()
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        context = browser.new_context(accept_downloads=True)
        context.set_default_timeout(20_000)
        browser_page = context.new_page()
        try:
            yield browser_page
            browser_page.screenshot(path=str(artifact_dir(request.node.name) / "final.png"), full_page=True)
        finally:
            context.close()
            browser.close()


def artifact_dir(test_name: str) -> Path:
    out = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]", "_", test_name)
    out.mkdir(parents=True, exist_ok=True)
    return out


def screenshot(page: Any, request: pytest.FixtureRequest, name: str) -> Path:
    """Save a named screenshot of the current page for this test; returns its path."""
    path = artifact_dir(request.node.name) / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0
    return path
