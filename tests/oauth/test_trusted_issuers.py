"""Trusted issuers: the services' validation (named messages), the fetch of metadata and keys
through the egress guard, the audit trail (append-only, secrets redacted), the admin (write-only
secret) and `manage.py oauth_issuer` (exit status 2 on refusal), and the discovery `auth` lanes."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, transaction
from django.test import Client

from apps.core.actors import os_user
from apps.core.errors import ValidationFailed
from apps.oauth.models import TrustedIssuer, TrustedIssuerChange
from apps.oauth.services import (
    OAUTH_INTROSPECTION_SECRET,
    introspection_secret,
    issuer_add,
    issuer_remove,
    issuer_update,
)
from apps.tenants.models import Tenant
from apps.tenants.services import tenant_get_or_create
from tests.envelope import SPEC
from tests.live import ROOT, process_env
from tests.oauth.auth_server import AuthServer

pytestmark = pytest.mark.django_db

AUTH_SCHEMA = SPEC / "openwop-v2/spec/v2/facets/auth.schema.json"


def _fields(auth: AuthServer, tenant: Tenant | None, **extra: Any) -> dict[str, Any]:
    return {"issuer": auth.issuer, "tenant": tenant, "introspection_client_id": "introspector", **extra}


def _refusal(fields: dict[str, Any], secret: str = "s3cret") -> ValidationFailed:
    with pytest.raises(ValidationFailed) as refused:
        issuer_add(fields=fields, introspection_client_secret=secret, actor="test")
    return refused.value


# --- validation: every rule names its field, nothing is fetched or written -----------------------


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"issuer": "http://idp.example"}, "issuer", "https URL"),
        ({"issuer": "https://idp.example/?a=b"}, "issuer", "query or fragment"),
        ({"algorithms": ["HS256"]}, "algorithms", "Never accepted: HS256"),
        ({"algorithms": ["none"]}, "algorithms", "Never accepted: none"),
        ({"algorithms": ["RS256", "EdDSA"]}, "algorithms", "Unsupported algorithms: EdDSA"),
        ({"algorithms": []}, "algorithms", "non-empty list"),
        ({"tenant_claim": "org"}, "tenant", "exactly one tenant mapping"),
        ({"tenant": None}, "tenant", "exactly one tenant mapping"),
        ({"revocation_window_seconds": 0}, "revocation_window_seconds", "at least 1 second"),
        ({"revocation": "exp-only", "revocation_window_seconds": 0}, "revocation_window_seconds", "exp-only needs"),
        ({"introspection_client_id": ""}, "introspection_client_id", "exp-and-recheck re-checks"),
        ({"required_scopes": {"mcp:everything": ["x"]}}, "required_scopes", "Unknown method family"),
        ({"lane": "saml"}, "lane", "oidc or oauth2"),
    ],
)
def test_each_rule_names_its_field(
    auth_server: AuthServer, tenant: Tenant, extra: dict[str, Any], field: str, words: str
) -> None:
    refused = _refusal({**_fields(auth_server, tenant), **extra})
    assert words in " ".join((refused.details or {})["fields"][field])
    assert words in refused.message
    assert not TrustedIssuer.objects.exists() and not TrustedIssuerChange.objects.exists()
    assert not auth_server.requests  # refused before anything was fetched


def test_a_tenant_claim_needs_its_allowed_tenants(auth_server: AuthServer) -> None:
    refused = _refusal(_fields(auth_server, None, tenant_claim="org"))
    assert "allowed tenants" in " ".join((refused.details or {})["fields"]["allowed_tenants"])


def test_exp_and_recheck_needs_the_secret_too(auth_server: AuthServer, tenant: Tenant) -> None:
    refused = _refusal(_fields(auth_server, tenant), secret="")
    assert "introspection_client_id" in (refused.details or {})["fields"]


# --- fetched through the egress guard -------------------------------------------------------------


def test_an_add_fetches_metadata_and_keys_and_is_audited(auth_server: AuthServer, tenant: Tenant) -> None:
    issuer = issuer_add(fields=_fields(auth_server, tenant), introspection_client_secret="s3cret", actor="ops")
    assert issuer.metadata is not None and issuer.metadata["issuer"] == auth_server.issuer
    assert issuer.jwks is not None and {k["kid"] for k in issuer.jwks["keys"]}
    assert issuer.fetched_at is not None
    assert auth_server.requests[:2] == [("GET", "/.well-known/openid-configuration"), ("GET", "/jwks")]
    # The secret is sealed at rest, and only "(set)" reaches the audit row.
    assert "s3cret" not in issuer.introspection_client_secret
    assert introspection_secret(issuer) == "s3cret"
    change = TrustedIssuerChange.objects.get()
    assert (change.issuer, change.actor, change.before) == (auth_server.issuer, "ops", None)
    assert change.after["introspection_client_secret"] == "(set)" and change.after["tenant"] == "acme"
    assert "s3cret" not in json.dumps(change.after)
    assert OAUTH_INTROSPECTION_SECRET  # its own sealing purpose


def test_an_unreachable_or_foreign_issuer_is_refused(auth_server: AuthServer, tenant: Tenant, settings: Any) -> None:
    # The metadata of https://host:port names https://host:port, not .../ : exact match (RFC 8414 §3.3).
    refused = _refusal(_fields(auth_server, tenant, issuer=auth_server.issuer + "/"))
    assert "names another issuer" in refused.message
    refused = _refusal(_fields(auth_server, tenant, issuer="https://127.0.0.1:1"))
    assert "did not answer" in refused.message
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = []  # the guard: loopback is not a public address
    refused = _refusal(_fields(auth_server, tenant))
    assert "egress guard refused" in refused.message
    assert not TrustedIssuer.objects.exists() and not TrustedIssuerChange.objects.exists()


def test_update_and_remove_are_audited_and_the_trail_is_append_only(auth_server: AuthServer, tenant: Tenant) -> None:
    issuer_add(fields=_fields(auth_server, tenant), introspection_client_secret="s3cret", actor="ops")
    row = issuer_update(
        issuer=auth_server.issuer, changes={"revocation_window_seconds": 60}, introspection_client_secret="n3w",
        actor="ops2",
    )  # fmt: skip
    assert introspection_secret(row) == "n3w"
    change = TrustedIssuerChange.objects.order_by("id").last()
    assert change is not None and change.actor == "ops2"
    assert (change.before["revocation_window_seconds"], change.after["revocation_window_seconds"]) == (300, 60)
    assert change.after["introspection_client_secret_changed"] is True
    assert "n3w" not in json.dumps(change.after) and "s3cret" not in json.dumps(change.before)
    # An unchanged update writes nothing.
    issuer_update(issuer=auth_server.issuer, changes={"revocation_window_seconds": 60}, actor="ops2")
    assert TrustedIssuerChange.objects.count() == 2
    with pytest.raises(ValidationFailed, match="exactly one tenant mapping"):
        issuer_update(issuer=auth_server.issuer, changes={"tenant": None}, actor="ops2")
    issuer_remove(issuer=auth_server.issuer, actor="ops3")
    assert not TrustedIssuer.objects.exists()
    last = TrustedIssuerChange.objects.order_by("id").last()
    assert last is not None and last.after == {"removed": True} and last.before["issuer"] == auth_server.issuer
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        TrustedIssuerChange.objects.filter(pk=last.pk).update(actor="someone else")


# --- the admin ------------------------------------------------------------------------------------


@pytest.fixture
def operator_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.test", "pw"))
    return client


def _form(auth: AuthServer, tenant: Tenant, **extra: Any) -> dict[str, Any]:
    return {
        "issuer": auth.issuer, "lane": "oidc", "audience": "", "tenant": str(tenant.pk), "tenant_claim": "",
        "subject_claim": "sub", "kind_claim": "", "default_kind": "user", "algorithms": '["RS256", "ES256"]',
        "revocation": "exp-and-recheck", "revocation_window_seconds": "300",
        "introspection_client_id": "introspector", "new_introspection_client_secret": "adm1n-s3cret",
        "required_scopes": "{}", "enabled": "on", **extra,
    }  # fmt: skip


def test_the_admin_adds_through_the_service_and_never_shows_the_secret(
    operator_client: Client, auth_server: AuthServer, tenant: Tenant
) -> None:
    response = operator_client.post("/admin/oauth/trustedissuer/add/", _form(auth_server, tenant))
    assert response.status_code == 302, response.content.decode()[:2000]
    issuer = TrustedIssuer.objects.get()
    assert introspection_secret(issuer) == "adm1n-s3cret" and issuer.jwks
    assert TrustedIssuerChange.objects.get().actor == "admin:root"
    page = operator_client.get(f"/admin/oauth/trustedissuer/{issuer.pk}/change/").content.decode()
    assert "adm1n-s3cret" not in page and issuer.introspection_client_secret not in page
    assert "set (hidden)" in page
    # Saved without a new secret: the stored one is kept.
    form = _form(auth_server, tenant, new_introspection_client_secret="", revocation_window_seconds="120")
    assert operator_client.post(f"/admin/oauth/trustedissuer/{issuer.pk}/change/", form).status_code == 302
    issuer.refresh_from_db()
    assert issuer.revocation_window_seconds == 120 and introspection_secret(issuer) == "adm1n-s3cret"
    assert TrustedIssuerChange.objects.count() == 2


def test_the_admin_form_shows_the_rules_messages(
    operator_client: Client, auth_server: AuthServer, tenant: Tenant
) -> None:
    form = _form(auth_server, tenant, algorithms='["HS256"]', tenant_claim="org")
    page = operator_client.post("/admin/oauth/trustedissuer/add/", form).content.decode()
    assert "Never accepted: HS256" in page and "exactly one tenant mapping" in page
    page = operator_client.post(
        "/admin/oauth/trustedissuer/add/", _form(auth_server, tenant, issuer="https://127.0.0.1:1")
    ).content.decode()
    assert "could not be fetched" in page
    assert not TrustedIssuer.objects.exists() and not TrustedIssuerChange.objects.exists()


# --- manage.py oauth_issuer -------------------------------------------------------------------------


def _command(*args: str) -> str:
    out = StringIO()
    call_command("oauth_issuer", *args, stdout=out)
    return out.getvalue()


def test_the_command_adds_lists_and_removes(
    auth_server: AuthServer, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant_get_or_create(slug="globex")
    monkeypatch.setenv("IDP_INTROSPECTION_SECRET", "from-the-env")
    assert _command("list").splitlines() == [  # issue 53 item 6: nothing trusted says so
        "no trusted issuers (oauth_issuer add --issuer <https URL> --tenant <slug> ... adds one)"
    ]
    out = _command(
        "add", "--issuer", auth_server.issuer, "--tenant-claim", "org", "--allowed-tenants", "globex",
        "--tenant", "acme", "--lane", "oauth2", "--introspection-client-id", "introspector",
        "--introspection-client-secret-env", "IDP_INTROSPECTION_SECRET", "--actor", "ticket 42",
    )  # fmt: skip
    assert f"added {auth_server.issuer}" in out and "tenant claim org in acme,globex" in out
    issuer = TrustedIssuer.objects.get()
    assert issuer.tenant is None and introspection_secret(issuer) == "from-the-env"
    assert TrustedIssuerChange.objects.get().actor == f"cli:{os_user()} as ticket 42"
    header, row = _command("list").splitlines()
    assert header.split("\t") == ["issuer", "lane", "tenants", "revocation", "audience", "state"]
    assert row.split("\t") == [
        auth_server.issuer,
        "oauth2",
        "claim org in acme,globex",
        "exp-and-recheck 300s",
        "(door URL)",
        "enabled",
    ]
    assert "removed" in _command("remove", "--issuer", auth_server.issuer)
    assert not TrustedIssuer.objects.exists() and TrustedIssuerChange.objects.count() == 2


def test_the_command_sets_required_scopes_and_the_documents_list_them(auth_server: AuthServer, tenant: Tenant) -> None:
    """Issue 32: `--require FAMILY=SCOPE[,SCOPE]` (repeatable) is the admin's required scopes, and
    each RFC 9728 document lists its own resource's."""
    client_id, secret = auth_server.introspection_client
    with pytest.MonkeyPatch.context() as env:
        env.setenv("IDP_INTROSPECTION_SECRET", secret)
        _command(
            "add", "--issuer", auth_server.issuer, "--tenant", "acme", "--introspection-client-id", client_id,
            "--introspection-client-secret-env", "IDP_INTROSPECTION_SECRET",
            "--require", "mcp:tools=mcp:tools", "--require", "mcp:tools=openid", "--require", "rest=api:read,api:write",
        )  # fmt: skip
    issuer = TrustedIssuer.objects.get()
    assert issuer.required_scopes == {"mcp:tools": ["mcp:tools", "openid"], "rest": ["api:read", "api:write"]}
    assert TrustedIssuerChange.objects.get().after["required_scopes"] == issuer.required_scopes
    prm = "/.well-known/oauth-protected-resource"
    assert Client().get(f"{prm}/mcp").json()["scopes_supported"] == ["mcp:tools", "openid"]
    assert Client().get(prm).json()["scopes_supported"] == ["api:read", "api:write"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "--issuer", "http://idp.example", "--tenant", "acme"], "https URL"),
        (["add", "--issuer", "https://idp.example", "--tenant", "nosuch"], "No such tenant: nosuch"),
        (
            ["add", "--issuer", "https://127.0.0.1:1", "--tenant", "acme", "--revocation", "exp-only"],
            "could not be fetched",
        ),
        (
            [
                "add",
                "--issuer",
                "https://idp.example",
                "--tenant",
                "acme",
                "--introspection-client-id",
                "x",
                "--introspection-client-secret-env",
                "OPENWOP_TEST_UNSET_VARIABLE",
            ],
            "empty or unset",
        ),
        (["remove", "--issuer", "https://never.example"], "No such trusted issuer"),
        (
            [
                "add",
                "--issuer",
                "https://idp.example",
                "--tenant",
                "acme",
                "--revocation",
                "exp-only",
                "--require",
                "mcp:tools",
            ],
            "give FAMILY=SCOPE",
        ),
        (
            [
                "add",
                "--issuer",
                "https://idp.example",
                "--tenant",
                "acme",
                "--revocation",
                "exp-only",
                "--require",
                "mcp:everything=x",
            ],
            "Unknown method family 'mcp:everything'",
        ),
    ],
)
def test_a_refusal_says_why_and_changes_nothing(tenant: Tenant, args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as refused:
        _command(*args)
    assert refused.value.returncode == 2 and message in str(refused.value)
    assert not TrustedIssuer.objects.exists() and not TrustedIssuerChange.objects.exists()


@pytest.mark.django_db(transaction=True)  # the child process sees the test database
def test_the_command_exits_with_status_2_from_a_shell(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "oauth_issuer", "add", "--issuer", "https://idp.example",
         "--tenant", "acme", "--algorithms", "HS256", "--revocation", "exp-only"],
        capture_output=True, text=True, timeout=60, env=process_env("oauth-issuer", tmp_path), cwd=str(ROOT),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "No such tenant: acme" in done.stderr and "Traceback" not in done.stderr
    tenant_get_or_create(slug="acme")
    done = subprocess.run(
        [sys.executable, "manage.py", "oauth_issuer", "add", "--issuer", "https://idp.example",
         "--tenant", "acme", "--algorithms", "HS256", "--revocation", "exp-only"],
        capture_output=True, text=True, timeout=60, env=process_env("oauth-issuer", tmp_path), cwd=str(ROOT),
    )  # fmt: skip
    assert done.returncode == 2 and "algorithms: Never accepted: HS256" in done.stderr, done.stderr
    assert not TrustedIssuer.objects.exists()


# --- discovery ----------------------------------------------------------------------------------------


def test_discovery_lists_each_lane_and_an_issuer_change_shows_at_once(
    client: Client, auth_server: AuthServer, tenant: Tenant
) -> None:
    schema = json.loads(AUTH_SCHEMA.read_text())

    def auth_record() -> dict[str, Any]:
        response = client.get("/.well-known/openwop")
        assert response.status_code == 200
        record: dict[str, Any] = json.loads(response.content)["auth"]
        jsonschema.validate(record, schema)
        return record

    assert [lane["lane"] for lane in auth_record()["lanes"]] == ["api-key"]
    etag = client.get("/.well-known/openwop")["ETag"]
    issuer_add(fields=_fields(auth_server, tenant), introspection_client_secret="s3cret", actor="test")
    lanes = auth_record()["lanes"]
    assert lanes[1] == {
        "lane": "oidc", "issuers": [auth_server.issuer], "revocation": "exp-and-recheck",
        "revocationWindowSeconds": 300, "minimumAssurance": "bearer",
    }  # fmt: skip
    assert client.get("/.well-known/openwop")["ETag"] != etag
    issuer_update(
        issuer=auth_server.issuer, changes={"revocation": "exp-only", "revocation_window_seconds": 900}, actor="t"
    )
    assert auth_record()["lanes"][1]["revocation"] == "exp-only"
    issuer_update(issuer=auth_server.issuer, changes={"enabled": False}, actor="t")
    assert [lane["lane"] for lane in auth_record()["lanes"]] == ["api-key"]


def test_exp_only_on_the_api_key_lane_would_not_validate() -> None:
    """The schema's own invariant, so the test above can fail: exp-only never on api-key."""
    schema = json.loads(AUTH_SCHEMA.read_text())
    bad = {"lanes": [{"lane": "api-key", "issuers": ["x"], "revocation": "exp-only", "minimumAssurance": "bearer"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
