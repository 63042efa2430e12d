"""Accessibility basics of the console: the sign-in works by keyboard alone (skip link, every input
reached by Tab in order through its label, visible focus, Enter submits); every page's text meets
WCAG AA contrast (4.5:1) and every control has a label; nothing is loaded from outside the host."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.browser.roles import PASSWORD, tenant_user
from tests.live import LiveProcess

# WCAG 2.x contrast of every element with its own text against its effective background, and
# every visible form control's accessible label. Returns what fails.
AUDIT = """() => {
  const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
  const linear = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const lum = ([r, g, b]) => 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b);
  const background = el => {
    for (; el; el = el.parentElement) {
      const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length === 3 || c[3] > 0) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const poor = [];
  for (const el of document.querySelectorAll("body *")) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length) continue;
    const a = lum(rgb(getComputedStyle(el).color)), b = lum(background(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) poor.push(el.tagName + " '" + el.textContent.trim().slice(0, 30) + "' " + ratio.toFixed(2));
  }
  const unlabelled = [...document.querySelectorAll("input:not([type=hidden]), select, textarea")]
    .filter(el => !(el.labels && el.labels.length) && !el.getAttribute("aria-label")).map(el => el.name || el.id);
  return {poor, unlabelled};
}"""

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
        ("INPUT", "Username"),
        ("INPUT", "Password"),
        ("BUTTON", "Sign in"),
        ("INPUT", "Password"),
        ("INPUT", "Username"),
        ("A", "Skip to content"),
    ]
    assert all(f["outline"] != "none" for f in seen), seen  # :focus-visible draws an outline
    page.keyboard.press("Tab")
    page.keyboard.type(account.username)
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    screenshot(page, request, "focus-on-password")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{base_url}/console/")
    assert page.locator("#tenant-slug").inner_text() == "acme"
    for path in ("/console/", "/console/keys/", "/console/push/", "/console/runs/", "/console/agents/"):
        page.goto(f"{base_url}{path}")
        assert page.evaluate(AUDIT) == {"poor": [], "unlabelled": []}, path
    # The audit itself can fail: grey on white and an unlabelled input are caught.
    page.evaluate("""() => { const p = document.createElement('p'); p.style.color = '#aaa'; p.textContent = 'faint';
      const i = document.createElement('input'); i.name = 'orphan'; document.body.append(p, i); }""")
    assert page.evaluate(AUDIT) == {"poor": ["P 'faint' 2.32"], "unlabelled": ["orphan"]}
    # Nothing is loaded from outside the host: every resource the page fetched is the host's own.
    hosts = page.evaluate("() => performance.getEntriesByType('resource').map(e => new URL(e.name).host)")
    assert hosts and set(hosts) == {base_url.removeprefix("http://")}
