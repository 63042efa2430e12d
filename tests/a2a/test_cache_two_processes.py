"""Issue 17's pins for the per-process caches (apps/core/invalidation.py; DESIGN.md §The hot path),
on two real server processes: a key revoked, or a facet edited, in this process is refused / seen
on the very next request in the other one, whose cache held the old answer.

Each test first shows that process B really answers from its cache (a change made with the
table's trigger disabled goes unseen there), so a pass cannot come from a cache that never cached.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from django.db import connection
from django.utils import timezone

from apps.core.invalidation import CHANNEL, listener_application_name
from apps.facets.models import Facet
from apps.facets.services import facet_ensure, facet_update
from apps.tenants.models import ApiKey
from apps.tenants.services import api_key_create, api_key_revoke, tenant_get_or_create
from tests.live import LiveProcess, start_web, wait_until

TASK_NOT_FOUND = -32001
EXTENDED_CARD_NOT_CONFIGURED = -32007


@pytest.fixture(scope="module")
def servers(_live_env) -> Iterator[list[tuple[LiveProcess, str]]]:  # type: ignore[no-untyped-def]
    """Two web server processes (as `make run` starts one) serving the test database: A and B."""
    env, var_dir = _live_env
    started: list[tuple[LiveProcess, str]] = []
    try:
        for _ in range(2):
            started.append(start_web(env, var_dir))
        yield started
    finally:
        for live, _ in started:
            live.stop()


def rpc(base_url: str, key: str, method: str, params: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{base_url}/a2a/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={"Authorization": f"Bearer {key}", "A2A-Version": "1.0"},
        timeout=30,
    )


def get_task(base_url: str, key: str) -> httpx.Response:
    return rpc(base_url, key, "GetTask", {"id": f"acme/{uuid.uuid4().hex}"})


def error_code(response: httpx.Response) -> int | None:
    body = response.json()
    return body["error"]["code"] if "error" in body else None


def listening(pids: set[int]) -> bool:
    """Both servers' listeners have run their LISTEN (pg_stat_activity shows it as their last query)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY(%s) AND state = 'idle' "
            "AND (query ILIKE %s OR query = 'SELECT 1')",
            [[listener_application_name(pid) for pid in pids], f"LISTEN {CHANNEL}"],
        )
        return int(cursor.fetchone()[0]) == len(pids)


def warm(servers: list[tuple[LiveProcess, str]], key: str) -> None:
    """A first request starts each server's listener (lazily); once both listen, the next ones
    fill their caches."""
    for _, url in servers:
        assert get_task(url, key).status_code == 200
    wait_until(lambda: listening({live.proc.pid for live, _ in servers}), "both servers' listeners", timeout=30)
    for _ in range(2):
        for _, url in servers:
            response = get_task(url, key)
            assert response.status_code == 200 and error_code(response) == TASK_NOT_FOUND


@contextmanager
def trigger_disabled(table: str) -> Iterator[None]:
    """The table's invalidation trigger off: its writes reach no cache (the control)."""
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER {table}_invalidate")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER {table}_invalidate")


def test_a_revoked_key_is_refused_on_its_next_request_in_another_process(
    servers: list[tuple[LiveProcess, str]], transactional_db: None
) -> None:
    (_, a_url), (_, b_url) = servers
    tenant, _ = tenant_get_or_create(slug="acme")
    key, raw = api_key_create(tenant=tenant)
    control, control_raw = api_key_create(tenant=tenant)
    warm(servers, raw)
    warm(servers, control_raw)

    # The control: B resolves the key from its cache, so a revocation nobody announces is unseen.
    with trigger_disabled("tenants_apikey"):
        ApiKey.unscoped_all_tenants.filter(pk=control.pk).update(revoked_at=timezone.now())
    assert get_task(b_url, control_raw).status_code == 200, "B did not answer from its cache: the test proves nothing"

    api_key_revoke(api_key=key)  # committed here, in a third process
    refused = get_task(b_url, raw)
    assert refused.status_code == 401, refused.text
    assert refused.headers["WWW-Authenticate"].lower().startswith("bearer")
    assert get_task(a_url, raw).status_code == 401
    # The announced write emptied the whole topic: the control's revocation now holds as well.
    assert get_task(b_url, control_raw).status_code == 401


def test_a_facet_edit_is_seen_by_another_process_on_its_next_request(
    servers: list[tuple[LiveProcess, str]], transactional_db: None
) -> None:
    (_, a_url), (_, b_url) = servers
    tenant, _ = tenant_get_or_create(slug="acme")
    _, raw = api_key_create(tenant=tenant)
    assert facet_ensure(protocol="a2a").agent_cards is True
    warm(servers, raw)
    for url in (a_url, b_url):  # the extended card is served while the facet says so
        response = rpc(url, raw, "GetExtendedAgentCard", {})
        assert response.status_code == 200 and error_code(response) is None, response.text

    # The control: B decides from its cached facet, so an edit nobody announces is unseen.
    with trigger_disabled("facets_facet"):
        Facet.objects.filter(pk="a2a").update(agent_cards=False)
        stale = rpc(b_url, raw, "GetExtendedAgentCard", {})
        Facet.objects.filter(pk="a2a").update(agent_cards=True)
    assert error_code(stale) is None, "B did not answer from its cache: the test proves nothing"

    facet_update(protocol="a2a", changes={"agent_cards": False}, actor="test")  # an operator's edit
    assert error_code(rpc(b_url, raw, "GetExtendedAgentCard", {})) == EXTENDED_CARD_NOT_CONFIGURED
    assert error_code(rpc(a_url, raw, "GetExtendedAgentCard", {})) == EXTENDED_CARD_NOT_CONFIGURED
