"""Issue 32 item 3: the operators' page's `oauth_issuer add --issuer <url> --tenant demo --lane oidc`
(docs/operators/oauth-issuers.md: issue 53 moved it out of the five-minute README), pasted
into a shell, trusts an issuer whose metadata allows RFC 7662 introspection without client
authentication (`none` in `introspection_endpoint_auth_methods_supported`), and the host then
re-checks its tokens that way; with an issuer that does not allow it, the same command still
exits 2 naming what to give, and writes nothing."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from apps.core.errors import CredentialRevoked, ValidationFailed
from apps.oauth.models import TrustedIssuer, TrustedIssuerChange
from apps.oauth.selectors import door_audience
from apps.oauth.services import issuer_add
from apps.oauth.verify import oauth_caches_clear, subject_from_jwt
from apps.tenants.models import Tenant
from apps.tenants.services import tenant_get_or_create
from tests.live import ROOT, process_env
from tests.oauth.auth_server import AuthServer

pytestmark = pytest.mark.django_db(transaction=True)  # the command's process sees the test database

# The page's one-line example, as printed (its issuer is the placeholder the reader replaces).
OAUTH_PAGE = ROOT / "docs/operators/oauth-issuers.md"
README_COMMAND = re.compile(
    r"^\.venv/bin/python manage\.py oauth_issuer add --issuer (\S+) --tenant demo --lane oidc$", re.M
)


def readme_command(issuer: str) -> list[str]:
    printed = README_COMMAND.search(OAUTH_PAGE.read_text())
    assert printed is not None, f"{OAUTH_PAGE.name} prints the one-line oauth_issuer add example"
    argv = shlex.split(printed.group(0).replace(printed.group(1), issuer))
    assert argv[0] == ".venv/bin/python"
    return [sys.executable, *argv[1:]]


def run_pasted(auth: AuthServer, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = process_env(
        "oauth-readme", tmp_path, OPENWOP_EGRESS_ALLOW_CIDRS="127.0.0.0/8", OPENWOP_EGRESS_CA_BUNDLE=auth.ca_bundle
    )
    return subprocess.run(
        readme_command(auth.issuer), capture_output=True, text=True, timeout=120, env=env, cwd=str(ROOT)
    )


@pytest.fixture
def demo(db: Any) -> Tenant:
    return tenant_get_or_create(slug="demo")[0]


def test_the_readme_command_trusts_an_issuer_that_introspects_without_a_client(
    auth_server: AuthServer, demo: Tenant, tmp_path: Path
) -> None:
    auth_server.introspection_auth_methods = ["none"]  # and no client could authenticate anyway
    done = run_pasted(auth_server, tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"added {auth_server.issuer} (oidc; tenant demo; exp-and-recheck 300s" in done.stdout
    issuer = TrustedIssuer.objects.get()
    assert (issuer.introspection_client_id, issuer.introspection_client_secret) == ("", "")
    assert TrustedIssuerChange.objects.get().after["revocation"] == "exp-and-recheck"

    # Its tokens are re-checked by introspection without client authentication: the server answers
    # only requests that carry none, so an accepted token proves the host sent none.
    oauth_caches_clear()
    token = auth_server.mint(aud=door_audience("rest"))
    before = auth_server.requests.count(("POST", "/introspect"))
    assert subject_from_jwt(token, door="rest").tenant == "demo"
    assert auth_server.requests.count(("POST", "/introspect")) == before + 1
    auth_server.revoke(token)
    oauth_caches_clear()
    with pytest.raises(CredentialRevoked):
        subject_from_jwt(token, door="rest")
    oauth_caches_clear()


def test_the_same_command_is_refused_when_the_issuer_needs_a_client(
    auth_server: AuthServer, demo: Tenant, tmp_path: Path
) -> None:
    assert auth_server.metadata["introspection_endpoint_auth_methods_supported"] == ["client_secret_basic"]
    done = run_pasted(auth_server, tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "introspection_client_id:" in done.stderr and "no `none` in" in done.stderr
    assert "give the introspection client id and secret" in done.stderr and "Traceback" not in done.stderr
    assert not TrustedIssuer.objects.exists() and not TrustedIssuerChange.objects.exists()


def test_a_client_id_without_its_secret_is_refused_before_any_fetch(auth_server: AuthServer, demo: Tenant) -> None:
    auth_server.introspection_auth_methods = ["none"]
    with pytest.raises(ValidationFailed) as refused:
        issuer_add(
            fields={"issuer": auth_server.issuer, "tenant": demo, "introspection_client_id": "introspector"},
            actor="test",
        )
    assert "together" in " ".join((refused.value.details or {})["fields"]["introspection_client_id"])
    assert not auth_server.requests and not TrustedIssuer.objects.exists()


def test_a_token_of_another_tenant_is_not_this_issuers(auth_server: AuthServer, demo: Tenant) -> None:
    """Cross-tenant: an issuer trusted without a client acts only in its tenant; a claim naming
    another tenant changes nothing."""
    auth_server.introspection_auth_methods = ["none"]
    issuer_add(fields={"issuer": auth_server.issuer, "tenant": demo}, actor="test")
    tenant_get_or_create(slug="globex")
    oauth_caches_clear()
    subject = subject_from_jwt(auth_server.mint(aud=door_audience("rest"), tenant="globex", org="globex"), door="rest")
    assert subject.tenant == "demo"
    oauth_caches_clear()
