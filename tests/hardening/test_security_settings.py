"""Production security settings (issue 12 §Security settings): with DEBUG off the cookies are
secure, HSTS is on (subdomains and preload configurable), the SSL redirect is configurable and the
proxy header is trusted only when asked; `check --deploy` is clean; and on a live production-mode
uvicorn the admin refuses a POST without a CSRF token while the bearer wire needs none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.live import ROOT

PRODUCTION = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": "s" * 60 + "-production-like-secret-key",
    "DJANGO_ALLOWED_HOSTS": "openwop.example",
    "OPENWOP_PUBLIC_URL": "https://openwop.example",
}
NAMES = [
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    "SECURE_SSL_REDIRECT",
    "SECURE_PROXY_SSL_HEADER",
    "SESSION_COOKIE_HTTPONLY",
    "SECURE_CONTENT_TYPE_NOSNIFF",
    "X_FRAME_OPTIONS",
]


def _django(env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "OPENWOP_"))}
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **env, "OPENWOP_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "openwop_host.settings"},
    )


def _settings(env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    code = (
        "import django, json; django.setup(); from django.conf import settings as s;"
        f"print(json.dumps({{n: getattr(s, n, None) for n in {NAMES!r}}}))"
    )
    result = _django(env, tmp_path, "-c", code)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_production_defaults(tmp_path: Path) -> None:
    values = _settings(PRODUCTION, tmp_path)
    assert values["SESSION_COOKIE_SECURE"] is True and values["CSRF_COOKIE_SECURE"] is True
    assert values["SECURE_HSTS_SECONDS"] >= 31536000
    assert values["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is True and values["SECURE_HSTS_PRELOAD"] is True
    assert values["SECURE_SSL_REDIRECT"] is True
    assert values["SECURE_PROXY_SSL_HEADER"] is None  # a forged X-Forwarded-Proto is not trusted by default
    assert values["SESSION_COOKIE_HTTPONLY"] is True and values["SECURE_CONTENT_TYPE_NOSNIFF"] is True
    assert values["X_FRAME_OPTIONS"] == "DENY"


def test_production_knobs(tmp_path: Path) -> None:
    values = _settings(
        {
            **PRODUCTION,
            "DJANGO_SECURE_PROXY_SSL_HEADER": "1",
            "DJANGO_SECURE_SSL_REDIRECT": "0",
            "DJANGO_SECURE_HSTS_PRELOAD": "0",
            "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "0",
            "DJANGO_SECURE_HSTS_SECONDS": "3600",
        },
        tmp_path,
    )
    assert values["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert values["SECURE_SSL_REDIRECT"] is False and values["SECURE_HSTS_SECONDS"] == 3600
    assert values["SECURE_HSTS_PRELOAD"] is False and values["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is False


def test_check_deploy_is_clean(tmp_path: Path) -> None:
    result = _django(PRODUCTION, tmp_path, "manage.py", "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_live_production_headers_and_csrf(live_url: str, make_key) -> None:  # type: ignore[no-untyped-def]
    """The shared live uvicorn runs with DJANGO_DEBUG=0 (tests/live.py): production middleware."""
    # Over HTTPS (as a TLS proxy reports it, were the header trusted) HSTS would be sent; over this
    # plain-HTTP test server Django rightly omits it, and the forged header changes nothing.
    forged = httpx.get(f"{live_url}/healthz", headers={"X-Forwarded-Proto": "https"})
    assert "strict-transport-security" not in forged.headers
    page = httpx.get(f"{live_url}/admin/login/")
    assert page.status_code == 200 and page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    refused = httpx.post(f"{live_url}/admin/login/", data={"username": "x", "password": "y"})
    assert refused.status_code == 403  # CSRF: the admin refuses a POST without token and cookie
    # The bearer wire is CSRF-exempt (a forged cross-site request carries no bearer credential).
    assert httpx.get(f"{live_url}/runs", headers={"Authorization": f"Bearer {make_key('acme')}"}).status_code == 200


def test_hsts_and_secure_cookies_behind_a_trusted_proxy(live_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.live import start_web

    env, _ = live_env
    web, base = start_web({**env, "DJANGO_SECURE_PROXY_SSL_HEADER": "1"}, tmp_path)
    try:
        response = httpx.get(f"{base}/admin/login/", headers={"X-Forwarded-Proto": "https"})
        assert response.status_code == 200
        hsts = response.headers["strict-transport-security"]
        assert "max-age=31536000" in hsts and "includeSubDomains" in hsts and "preload" in hsts
        cookie = response.headers["set-cookie"]
        assert "csrftoken=" in cookie and "Secure" in cookie and "SameSite=Lax" in cookie
        plain = httpx.get(f"{base}/admin/login/")  # no proxy claim: not secure, so no HSTS
        assert "strict-transport-security" not in plain.headers
    finally:
        web.stop()
