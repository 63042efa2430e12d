"""Keyboard use of the console sign-in (accessibility basics): the skip link comes first, every
input is reached by Tab in order through its label, focus is visible, Enter submits; and the page
loads nothing from outside the host (no CDN)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.browser.roles import PASSWORD, tenant_user
from tests.live import LiveProcess

FOCUSED = """() => {
  const el = document.activeElement;
  const label = el.labels && el.labels.length ? el.labels[0].textContent.trim() : el.textContent.trim();
  return {tag: el.tagName, label: label, outline: getComputedStyle(el).outlineStyle};
}"""


def test_console_login_by_keyboard_only(
    browser_host: tuple[str, LiveProcess], page: Any, request: pytest.FixtureRequest
) -> None:
    base_url, _ = browser_host
    account = tenant_user("acme", "kim-keyboard")
    page.goto(f"{base_url}/console/login/")
    seen = [page.evaluate(FOCUSED)]  # the username field has autofocus
    for key in ("Tab", "Tab", "Shift+Tab", "Shift+Tab", "Shift+Tab"):
        page.keyboard.press(key)
        seen.append(page.evaluate(FOCUSED))
    assert [(f["tag"], f["label"]) for f in seen] == [
        ("INPUT", "Username"), ("INPUT", "Password"), ("BUTTON", "Sign in"),
        ("INPUT", "Password"), ("INPUT", "Username"), ("A", "Skip to content"),
    ]
    assert all(f["outline"] != "none" for f in seen), seen  # :focus-visible draws an outline
    page.keyboard.press("Tab")
    page.keyboard.type(account.username)
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    screenshot(page, request, "focus-on-password")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{base_url}/console/keys/")
    assert page.locator("#tenant-slug").inner_text() == "acme"
    # Nothing is loaded from outside the host: every resource the page fetched is the host's own.
    hosts = page.evaluate("() => performance.getEntriesByType('resource').map(e => new URL(e.name).host)")
    assert hosts and set(hosts) == {base_url.removeprefix("http://")}
