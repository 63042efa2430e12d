"""An open stream ends once its OAuth access token expires (issue 33 item 6), on a live uvicorn
that trusts a loopback authorization server (tests/oauth/auth_server.py), with
OPENWOP_STREAM_RECHECK_SECONDS=0.5 and no clock leeway.

A token that expires a few seconds after the stream opened: the stream ends (bounded by a generous
timeout, no timing assert). Another tenant's token with an ordinary lifetime keeps its stream.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from apps.agents.services import workflow_fixtures_seed
from apps.oauth.services import issuer_add
from apps.tenants.services import tenant_get_or_create
from tests.live import start_web
from tests.oauth.auth_server import AuthServer
from tests.oauth.conftest import live_oauth_env

AUDIENCE = "api://openwop-stream-expiry"
ENDS_WITHIN = 60.0  # generous: the token lives ten seconds, the stream re-checks every 0.5 s


@pytest.fixture(scope="module")
def module_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    with AuthServer(ca=trustme.CA(), tmp=tmp_path_factory.mktemp("oauth-stream")) as server:
        yield server


@pytest.fixture(scope="module")
def oauth_host(live_env: Any, module_auth: AuthServer) -> Iterator[str]:
    env, var_dir = live_env
    env = {**env, **live_oauth_env(module_auth), "OPENWOP_STREAM_RECHECK_SECONDS": "0.5",
           "OPENWOP_OAUTH_LEEWAY_SECONDS": "0"}  # fmt: skip
    live, base_url = start_web(env, Path(var_dir))
    yield base_url
    live.stop()


@pytest.fixture
def trusted(
    transactional_db: None, module_auth: AuthServer, settings: Any, live_env: Any, live_worker: Any
) -> AuthServer:
    """The issuer, trusted for acme and globex (claim `org`), committed (as tests/oauth do)."""
    settings.SECRET_KEY = live_env[0]["DJANGO_SECRET_KEY"]
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.0/8"]
    settings.OPENWOP_EGRESS_CA_BUNDLE = module_auth.ca_bundle
    tenants = [tenant_get_or_create(slug=slug)[0] for slug in ("acme", "globex")]
    for tenant in tenants:
        workflow_fixtures_seed(tenant=tenant)
    client_id, secret = module_auth.introspection_client
    issuer_add(
        fields={
            "issuer": module_auth.issuer, "audience": AUDIENCE, "tenant_claim": "org", "allowed_tenants": tenants,
            "introspection_client_id": client_id,
        },
        introspection_client_secret=secret, actor="test",
    )  # fmt: skip
    return module_auth


def _events(base: str, token: str) -> tuple[str, dict[str, str]]:
    headers = {"Authorization": f"Bearer {token}"}
    created = httpx.post(f"{base}/runs", json={"workflowId": "conformance-approval"}, headers=headers, timeout=30)
    assert created.status_code == 201, created.text
    return f"{base}/runs/{created.json()['runId'].replace('/', '~2F')}/events", headers


def test_a_stream_ends_when_its_token_expires(oauth_host: str, trusted: AuthServer) -> None:
    short = trusted.mint(sub="alice", aud=AUDIENCE, org="acme", lifetime=10)
    ordinary = trusted.mint(sub="carol", aud=AUDIENCE, org="globex")
    mine, my_headers = _events(oauth_host, short)
    theirs, their_headers = _events(oauth_host, ordinary)
    with httpx.stream("GET", theirs, headers=their_headers, timeout=30) as kept:
        assert kept.status_code == 200
        kept_lines = kept.iter_lines()
        assert next(kept_lines) == ": stream open"
        lines: list[str] = []
        deadline = time.monotonic() + ENDS_WITHIN
        with httpx.stream("GET", mine, headers=my_headers, timeout=30) as stream:
            assert stream.status_code == 200
            for line in stream.iter_lines():  # the heartbeat (15 s) gives the loop a turn
                lines.append(line)
                assert time.monotonic() < deadline, "the stream outlived its token"
        assert ": credential no longer valid" in lines
        # The expired token is refused on a new request too; the other tenant's stream is still open.
        assert httpx.get(mine, headers=my_headers, timeout=30).status_code == 401
        assert not kept.is_closed
