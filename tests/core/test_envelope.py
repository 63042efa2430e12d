"""Every REST error path answers the closed envelope with the registered code and status."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings
from django.urls import path

from apps.core.errors import REGISTERED_STATUS
from tests.envelope import assert_envelope, envelope_schema


def _boom(request):  # type: ignore[no-untyped-def]
    raise RuntimeError("secret internals that must not leak")


urlpatterns = [path("runs-boom", _boom)]


def test_our_status_table_matches_the_registry() -> None:
    registry = envelope_schema()["x-openwop-http-status"]
    for code, status in REGISTERED_STATUS.items():
        assert registry[code] == status, code


def test_unknown_path_is_not_found(client: Client, db) -> None:  # type: ignore[no-untyped-def]
    # db: an unrouted path reaches the catch-all that serves a moved A2A card (one facet read).
    body = assert_envelope(client.get("/no/such/thing"), "not_found", 404)
    assert body["message"]


def test_wrong_method_is_enveloped_405(client: Client) -> None:
    response = client.post("/.well-known/openwop")
    body = assert_envelope(response, "validation_error", 405)
    assert "GET" in response.headers["Allow"]
    assert "GET" in body["details"]["allowed"]


def test_unlisted_major_is_406_with_protocol_versions(client: Client) -> None:
    response = client.get("/.well-known/openwop", headers={"OpenWOP-Version": "3"})
    body = assert_envelope(response, "protocol_version_unsupported", 406)
    assert body["details"]["protocolVersions"] == ["2.46"]
    assert response.headers["OpenWOP-Version"] == "2.46"


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["2", "2.0", "2.46", "2.99"])
def test_listed_major_is_served_in_both_forms(client: Client, value: str) -> None:
    response = client.get("/.well-known/openwop", headers={"OpenWOP-Version": value})
    assert response.status_code == 200
    assert response.headers["OpenWOP-Version"] == "2.46"


def test_malformed_version_header_is_validation_error(client: Client) -> None:
    assert_envelope(client.get("/.well-known/openwop", headers={"OpenWOP-Version": "two"}), "validation_error", 400)


@override_settings(ROOT_URLCONF=__name__, DEBUG=False)
def test_unhandled_exception_is_internal_error_without_trace() -> None:
    response = Client(raise_request_exception=False).get("/runs-boom")
    body = assert_envelope(response, "internal_error", 500)
    assert "secret internals" not in response.content.decode()
    assert "Traceback" not in response.content.decode()
    assert body["message"]
    assert response.headers["OpenWOP-Version"] == "2.46"


@pytest.mark.django_db
def test_missing_credential_is_unauthenticated_with_challenge(client: Client) -> None:
    response = client.get("/host/openwop-host/api/whoami")
    assert_envelope(response, "unauthenticated", 401)
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_non_protocol_pages_carry_no_openwop_version(client: Client) -> None:
    response = client.get("/admin/login/")
    assert response.status_code == 200
    assert "OpenWOP-Version" not in response.headers
    assert response.headers["Content-Type"].startswith("text/html")


@pytest.mark.django_db
def test_post_without_csrf_cookie_on_protocol_path_is_not_an_html_refusal() -> None:
    # CSRF guards the cookie-session pages only; bearer paths answer with the envelope.
    client = Client(enforce_csrf_checks=True)
    response = client.post("/host/openwop-host/api/whoami", data="{}", content_type="application/json")
    assert_envelope(response, "unauthenticated", 401)
