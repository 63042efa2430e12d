"""A key created in the admin is shown the way the console shows one: sealed in the session across
the redirect and rendered once on the new key's page, never carried in a cookie (the `messages`
cookie is signed, not encrypted). Issue 33 item 5, driven as a browser on the live host."""

from __future__ import annotations

import re
import uuid
from http.cookies import SimpleCookie

import httpx
import pytest
from django.contrib.auth.models import User
from django.contrib.messages.storage.cookie import CookieStorage
from django.http import HttpRequest
from django.test import override_settings

from apps.tenants.services import tenant_get_or_create
from tests.browser.roles import PASSWORD
from tests.form_posts import browser_client, form_post

SHOWN = re.compile(r"owk_[0-9a-f]{12}\.[A-Za-z0-9_-]{40,}")


def _cookie_texts(response: httpx.Response, secret_key: str) -> list[str]:
    """Every Set-Cookie of `response` as sent, and the messages it carries, decoded as Django does."""
    texts = []
    for header in response.headers.get_list("set-cookie"):
        texts.append(header)
        for name, morsel in SimpleCookie(header).items():
            if name == "messages" and morsel.value:
                with override_settings(SECRET_KEY=secret_key):
                    decoded = CookieStorage(HttpRequest())._decode(morsel.value)
                assert decoded is not None, "the messages cookie did not decode"
                texts.extend(str(message) for message in decoded)
    return texts


@pytest.fixture
def operator(live_url: str) -> httpx.Client:
    name = f"op_{uuid.uuid4().hex[:10]}"
    User.objects.create_user(name, password=PASSWORD, is_staff=True, is_superuser=True)
    client = browser_client(live_url)
    signed_in = form_post(client, "/admin/login/", {"username": name, "password": PASSWORD})
    assert signed_in.status_code == 302 and signed_in.headers["Location"] == "/admin/"
    return client


def test_a_new_key_is_shown_once_and_never_rides_in_a_cookie(live_url: str, live_env, operator: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    secret_key = live_env[0]["DJANGO_SECRET_KEY"]
    acme = tenant_get_or_create(slug="acme")[0]
    tenant_get_or_create(slug="globex")
    form = {"tenant": str(acme.pk), "kind": "agent", "label": "ci"}
    created = form_post(operator, "/admin/tenants/apikey/add/", form)
    assert created.status_code == 302
    page_url = created.headers["Location"]
    page = operator.get(page_url)
    shown = SHOWN.findall(page.text)
    assert len(shown) == 1, "the page shows the new key exactly once"
    raw = shown[0]
    secret = raw.split(".", 1)[1]
    for response in (created, page):
        for text in _cookie_texts(response, secret_key):
            assert secret not in text and raw not in text, text
    assert re.fullmatch(r"/admin/tenants/apikey/\d+/change/", page_url)  # the new key's own page
    assert page.status_code == 200 and "no-store" in page.headers["Cache-Control"]

    # It is the key just made, of the tenant it was made for (not another tenant's).
    whoami = httpx.get(f"{live_url}/host/openwop-host/api/whoami", headers={"Authorization": f"Bearer {raw}"})
    assert whoami.status_code == 200 and whoami.json()["subject"]["tenant"] == "acme"

    # Once: the page again and the list do not carry it.
    for url in (page_url, "/admin/tenants/apikey/"):
        again = operator.get(url)
        assert again.status_code == 200 and secret not in again.text and not SHOWN.search(again.text)
