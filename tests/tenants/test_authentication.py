"""Bearer API keys resolve to the caller's Subject, and fail closed (identity.md §1-2, §6)."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from apps.tenants.authentication import request_subject
from apps.tenants.models import ApiKey
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.services import api_key_revoke
from tests.envelope import assert_envelope

WHOAMI = "/host/openwop-host/api/whoami"
pytestmark = pytest.mark.django_db


def _get(client: Client, authorization: str | None, **headers: str):  # type: ignore[no-untyped-def]
    if authorization is not None:
        headers["Authorization"] = authorization
    return client.get(WHOAMI, headers=headers)


def test_valid_key_resolves_to_a_closed_subject(client: Client, make_key) -> None:  # type: ignore[no-untyped-def]
    raw = make_key("acme", kind="agent")
    response = _get(client, f"Bearer {raw}")
    assert response.status_code == 200
    subject = response.json()["subject"]
    assert set(subject) == {"issuer", "subjectId", "tenant", "lane", "kind"}
    assert subject["tenant"] == "acme"
    assert subject["lane"] == "api-key"
    assert subject["kind"] == "agent"
    # subjectId is opaque and stable, and never the key or part of its secret.
    assert raw not in subject["subjectId"] and raw.split(".")[1] not in subject["subjectId"]
    assert _get(client, f"Bearer {raw}").json()["subject"] == subject


def test_scheme_is_case_insensitive(client: Client, make_key) -> None:  # type: ignore[no-untyped-def]
    assert _get(client, f"bearer {make_key()}").status_code == 200


def test_missing_credential(client: Client) -> None:
    response = _get(client, None)
    assert_envelope(response, "unauthenticated", 401)
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "Bearer owk_abc",
        "Bearer not-a-key",
        "Bearer owk_000000000000.wrongsecret",
        "Bearer a b",
        "owk_000000000000.x",
    ],
)
def test_malformed_or_invalid_credential(client: Client, authorization: str) -> None:
    response = _get(client, authorization)
    assert_envelope(response, "unauthenticated", 401)
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_right_prefix_wrong_secret_is_refused(client: Client, make_key) -> None:  # type: ignore[no-untyped-def]
    raw = make_key()
    prefix = raw.split(".")[0]
    assert_envelope(_get(client, f"Bearer {prefix}.{'A' * 43}"), "unauthenticated", 401)


def test_revoked_key_fails_on_its_next_use(client: Client, make_key) -> None:  # type: ignore[no-untyped-def]
    raw = make_key()
    assert _get(client, f"Bearer {raw}").status_code == 200
    api_key = ApiKey.unscoped_all_tenants.get(prefix=raw.split(".")[0].removeprefix("owk_"))
    api_key_revoke(api_key=api_key)
    response = _get(client, f"Bearer {raw}")
    assert_envelope(response, "credential_revoked", 401)
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_other_tenant_cannot_be_selected_by_the_request(client: Client, make_key) -> None:  # type: ignore[no-untyped-def]
    acme = make_key("acme")
    globex = make_key("globex")
    # Nothing but the credential decides the tenant: headers and query strings are ignored.
    response = client.get(WHOAMI + "?tenant=globex", headers={"Authorization": f"Bearer {acme}", "X-Tenant": "globex"})
    assert response.json()["subject"]["tenant"] == "acme"
    assert _get(client, f"Bearer {globex}").json()["subject"]["tenant"] == "globex"
    assert subject_from_api_key(acme).subject_id != subject_from_api_key(globex).subject_id


def test_keys_are_stored_hashed(make_key) -> None:  # type: ignore[no-untyped-def]
    raw = make_key()
    secret = raw.split(".")[1]
    stored = ApiKey.unscoped_all_tenants.get(prefix=raw.split(".")[0].removeprefix("owk_"))
    assert secret not in stored.secret_digest and stored.secret_digest != secret
    assert len(stored.secret_digest) == 64


class _OptedOutOfIsAuthenticated(APIView):
    permission_classes = [AllowAny]

    def get(self, request: Request) -> Response:
        return Response({"tenant": request_subject(request).tenant})


def test_request_subject_is_the_callers_subject(make_key) -> None:  # type: ignore[no-untyped-def]
    raw = make_key("acme")
    request = APIRequestFactory().get("/x", HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = _OptedOutOfIsAuthenticated.as_view()(request)
    assert response.status_code == 200 and response.data == {"tenant": "acme"}


def test_request_subject_without_a_credential_is_a_401_not_a_500() -> None:
    # A view that lets anonymous callers in and still asks for the Subject: request.auth is None.
    response = _OptedOutOfIsAuthenticated.as_view()(APIRequestFactory().get("/x"))
    response.render()
    assert_envelope(response, "unauthenticated", 401)
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
