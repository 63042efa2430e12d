"""OAuth lane fixtures: a real authorization server on loopback over TLS (auth_server.py), and the
egress allowance the host needs to reach it (the guard stays on; only 127.0.0.0/8 is admitted, and
only the test CA is trusted, in these tests only)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.oauth.auth_server import AuthServer


@pytest.fixture(scope="session")
def oauth_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def auth_server(oauth_ca: trustme.CA, tmp_path: Path, settings: Any) -> Iterator[AuthServer]:
    """A running authorization server; this process's egress guard admits loopback and trusts its CA."""
    with AuthServer(ca=oauth_ca, tmp=tmp_path) as server:
        settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.0/8"]
        settings.OPENWOP_EGRESS_CA_BUNDLE = server.ca_bundle
        yield server


def live_oauth_env(server: AuthServer) -> dict[str, str]:
    """The environment a spawned host process needs to reach `server` through its egress guard."""
    return {"OPENWOP_EGRESS_ALLOW_CIDRS": "127.0.0.0/8", "OPENWOP_EGRESS_CA_BUNDLE": server.ca_bundle}
