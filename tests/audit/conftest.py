"""Fixtures for host-event tests: Subjects from API keys, and a live host with the conformance seams on."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from apps.tenants.selectors import subject_from_api_key
from apps.tenants.subject import Subject
from tests.live import start_web


@pytest.fixture
def make_subject(make_key) -> Callable[..., tuple[str, Subject]]:  # type: ignore[no-untyped-def]
    """make_subject("acme") -> (raw API key, its Subject)."""

    def _make(slug: str = "acme", *, kind: str = "user") -> tuple[str, Subject]:
        raw = make_key(slug, kind=kind)
        return raw, subject_from_api_key(raw)

    return _make


@pytest.fixture(scope="session")
def _seams_web(live_env) -> Iterator[str]:  # type: ignore[no-untyped-def]
    env, var_dir = live_env
    live, base_url = start_web({**env, "OPENWOP_CONFORMANCE_SEAMS": "1"}, var_dir)
    yield base_url
    live.stop()


@pytest.fixture
def seams_live_url(_seams_web: str, transactional_db) -> str:  # type: ignore[no-untyped-def]
    """A uvicorn with OPENWOP_CONFORMANCE_SEAMS on (RFC 0241 emitTestHostEvent is served)."""
    return _seams_web
