"""Per-process caches with cross-process invalidation (apps/core/invalidation.py; DESIGN.md §The
hot path): a hit reads no database, a committed write to any source table empties its topic by
trigger + NOTIFY (no call site involved), a rolled-back one does not, a loader that raced a commit
stores nothing, and the caches are off while the listener is not listening."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from apps.a2a import card as card_module
from apps.a2a.card import (
    acard_document_cached,
    agent_card,
    agent_card_cached,
    card_document_cached,
    card_document_of,
    public_card_current,
)
from apps.a2a.models import SkillRoute
from apps.agents.models import Agent, Workflow
from apps.agents.routing_values import a2a_tenant_of
from apps.agents.selectors import agent_by_a2a_tenant
from apps.agents.services import DEMO_AGENT_ID
from apps.core import invalidation
from apps.core.errors import CredentialRevoked, Unauthenticated
from apps.core.invalidation import (
    CHANNEL,
    TOPIC_APIKEY,
    TOPIC_CARD,
    TOPIC_FACET,
    cache_generation,
    cache_listening,
    cache_size,
    cached,
    last_notification,
    listener_application_name,
    wait_for,
)
from apps.facets import services as facet_services
from apps.facets.models import Facet
from apps.facets.services import afacet_cached, facet_cached, facet_ensure, facet_update
from apps.tenants import selectors as tenant_selectors
from apps.tenants.models import ApiKey, Tenant
from apps.tenants.selectors import (
    asubject_from_authorization_cached,
    subject_from_api_key,
    subject_from_authorization_cached,
)
from apps.tenants.services import api_key_create, api_key_revoke, tenant_get_or_create

WAIT = 10.0  # seconds a notification may take before the test fails (it takes milliseconds)


class Loads:
    """A loader that counts its calls."""

    def __init__(self, value: Any = "loaded") -> None:
        self.value, self.calls = value, 0

    def __call__(self) -> Any:
        self.calls += 1
        return self.value


@pytest.fixture
def listening(transactional_db) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Committed writes (transactional_db) and this process's listener up, caches empty."""
    cached(TOPIC_FACET, "warm-up", Loads())  # the first lookup starts the listener
    assert wait_for(cache_listening, WAIT), "the invalidation listener did not connect"
    settle()
    yield


def invalidated(topic: str, before: int) -> bool:
    """Wait until `topic` was invalidated since `before` (its generation then)."""
    return wait_for(lambda: cache_generation(topic) > before, WAIT)


def settle() -> None:
    """Let every notification of the writes committed so far arrive (the previous test's flush,
    this test's set-up): they come in commit order, so once a barrier sent now is back, they are
    all in. A payload naming no topic empties every topic."""
    barrier = f"barrier:{uuid.uuid4()}"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, barrier])
    assert wait_for(lambda: last_notification() == barrier, WAIT), "the barrier notification did not arrive"


def sql(statement: str) -> Callable[[], None]:
    def run() -> None:
        with connection.cursor() as cursor:
            cursor.execute(statement)

    return run


def api_key() -> tuple[ApiKey, str]:
    tenant, _ = tenant_get_or_create(slug="acme")
    return api_key_create(tenant=tenant)


# ---------------------------------------------------------------------------------------------
# The mechanism


def test_a_hit_returns_the_stored_value_without_loading(listening: None) -> None:
    loads = Loads()
    assert cached(TOPIC_FACET, "k", loads) == "loaded"
    assert cached(TOPIC_FACET, "k", loads) == "loaded"
    assert loads.calls == 1


def test_a_loader_that_raises_stores_nothing(listening: None) -> None:
    def refuse() -> str:
        raise Unauthenticated("no")

    for _ in range(2):
        with pytest.raises(Unauthenticated):
            cached(TOPIC_APIKEY, "k", refuse)
    assert cache_size(TOPIC_APIKEY) == 0


@pytest.mark.parametrize(
    ("topic", "write"),
    [
        (TOPIC_APIKEY, lambda: ApiKey.unscoped_all_tenants.update(label="bulk")),
        (TOPIC_APIKEY, lambda: Tenant.objects.update(name="renamed")),
        (TOPIC_FACET, lambda: Facet.objects.filter(pk="a2a").update(streaming=False)),
        (TOPIC_CARD, lambda: Facet.objects.filter(pk="a2a").update(agent_cards=False)),
        (TOPIC_CARD, lambda: SkillRoute.objects.update(description="edited")),
        (TOPIC_CARD, lambda: Agent.unscoped_all_tenants.update(description="edited")),
        (TOPIC_CARD, lambda: Workflow.unscoped_all_tenants.update(description="edited")),
        (TOPIC_CARD, sql("DELETE FROM a2a_skillroute WHERE id = -1")),  # a statement, even on no row
    ],
    ids=["apikey", "tenant", "facet", "facet-card", "skillroute", "agent", "workflow", "empty-delete"],
)
def test_a_committed_write_to_a_source_table_empties_its_topic(
    listening: None, topic: str, write: Callable[[], Any]
) -> None:
    """Plain ORM writes, no service: the table's trigger alone must invalidate."""
    api_key()
    facet_ensure(protocol="a2a")
    public_card_current()  # seeds the skill routes
    settle()
    loads = Loads()
    cached(topic, "k", loads)
    cached(topic, "k", loads)
    assert loads.calls == 1
    before = cache_generation(topic)
    write()
    assert invalidated(topic, before), f"no invalidation of {topic!r} after a committed write"
    assert cache_size(topic) == 0
    cached(topic, "k", loads)
    assert loads.calls == 2


def test_raw_sql_invalidates_too(listening: None) -> None:
    facet_ensure(protocol="mcp")
    settle()
    cached(TOPIC_FACET, "k", Loads())
    before = cache_generation(TOPIC_FACET)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE facets_facet SET mrtr_max_rounds = 5 WHERE protocol = 'mcp'")
    assert invalidated(TOPIC_FACET, before)
    assert cache_size(TOPIC_FACET) == 0


def test_a_rolled_back_write_invalidates_nothing(listening: None) -> None:
    api_key()
    facet_ensure(protocol="a2a")
    settle()
    cached(TOPIC_APIKEY, "k", Loads())
    apikey_before = cache_generation(TOPIC_APIKEY)
    with pytest.raises(RuntimeError), transaction.atomic():
        ApiKey.unscoped_all_tenants.update(label="never")
        raise RuntimeError("roll back")
    # Notifications arrive in commit order: once a later commit's has come, the rolled-back
    # write's would have come before it.
    facet_before = cache_generation(TOPIC_FACET)
    Facet.objects.filter(pk="a2a").update(streaming=False)
    assert invalidated(TOPIC_FACET, facet_before)
    assert cache_generation(TOPIC_APIKEY) == apikey_before
    assert cache_size(TOPIC_APIKEY) == 1


def test_a_value_loaded_across_a_commit_is_not_stored(listening: None) -> None:
    """The loader read the row, then a commit's notification arrived before it returned: what it
    read may predate the commit, and the notification is gone, so storing it would keep it."""
    facet_ensure(protocol="a2a")
    settle()

    def racing_loader() -> str:
        before = cache_generation(TOPIC_FACET)
        Facet.objects.filter(pk="a2a").update(streaming=False)  # another writer's commit
        assert invalidated(TOPIC_FACET, before)
        return "read before the commit"

    assert cached(TOPIC_FACET, "k", racing_loader) == "read before the commit"
    assert cache_size(TOPIC_FACET) == 0


def test_inside_an_atomic_block_the_cache_is_bypassed(listening: None) -> None:
    loads = Loads()
    cached(TOPIC_FACET, "k", loads)
    with transaction.atomic():
        # The block may read its own uncommitted writes: neither served from nor stored.
        cached(TOPIC_FACET, "k", loads)
        cached(TOPIC_FACET, "other", loads)
    assert loads.calls == 3
    assert cache_size(TOPIC_FACET) == 1


def _terminate_listener() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
            [listener_application_name()],
        )
        return int(cursor.fetchone()[0])


def test_while_the_listener_is_down_every_lookup_loads(listening: None, monkeypatch: pytest.MonkeyPatch) -> None:
    loads = Loads()
    cached(TOPIC_APIKEY, "k", loads)
    # Keep it down: its reconnects go to a port nobody listens on.
    monkeypatch.setattr(invalidation, "_conninfo", lambda: "host=127.0.0.1 port=1 dbname=nowhere connect_timeout=1")
    assert _terminate_listener() == 1
    assert wait_for(lambda: not cache_listening(), WAIT), "the listener did not notice its connection dropped"
    assert cache_size(TOPIC_APIKEY) == 0  # dropped with the connection: notifications may be lost
    for _ in range(3):
        cached(TOPIC_APIKEY, "k", loads)
    assert loads.calls == 4
    assert cache_size(TOPIC_APIKEY) == 0

    monkeypatch.undo()  # the database is reachable again: it reconnects (backoff) and caches
    assert wait_for(cache_listening, 60), "the listener did not reconnect"
    cached(TOPIC_APIKEY, "k", loads)
    cached(TOPIC_APIKEY, "k", loads)
    assert loads.calls == 5


# ---------------------------------------------------------------------------------------------
# The wired reads


def test_an_api_key_hit_reads_nothing_and_a_revocation_is_seen_next(listening: None) -> None:
    key, raw = api_key()
    settle()
    header = f"Bearer {raw}"
    subject = subject_from_authorization_cached(header)
    assert subject == subject_from_api_key(raw) and subject.tenant_pk == key.tenant_id
    with CaptureQueriesContext(connection) as queries:
        assert subject_from_authorization_cached(header) == subject
    assert len(queries) == 0, queries.captured_queries
    # Keyed by the key's digest: the raw key is in no cache.
    assert all(raw not in repr(k) for k in invalidation._state.entries[TOPIC_APIKEY])

    api_key_revoke(api_key=key)
    with pytest.raises(CredentialRevoked):
        subject_from_authorization_cached(header)
    with pytest.raises(CredentialRevoked):  # refusals are never cached: the same answer each time
        subject_from_authorization_cached(header)


def test_a_revocation_by_plain_sql_is_seen_once_notified(listening: None) -> None:
    key, raw = api_key()
    settle()
    subject_from_authorization_cached(f"Bearer {raw}")
    before = cache_generation(TOPIC_APIKEY)
    ApiKey.unscoped_all_tenants.filter(pk=key.pk).update(revoked_at=key.created_at)  # no service
    assert invalidated(TOPIC_APIKEY, before)
    with pytest.raises(CredentialRevoked):
        subject_from_authorization_cached(f"Bearer {raw}")


def test_unknown_keys_are_refused_and_never_cached(listening: None) -> None:
    _, raw = api_key()
    wrong = raw[:-4] + ("aaaa" if not raw.endswith("aaaa") else "bbbb")
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            subject_from_authorization_cached(f"Bearer {wrong}")
    with pytest.raises(Unauthenticated):
        subject_from_authorization_cached("Basic abc")
    assert cache_size(TOPIC_APIKEY) == 0


def test_the_facet_hit_reads_nothing_and_an_edit_is_seen_next(listening: None) -> None:
    facet_cached(protocol="a2a")  # creates the row, as facet_ensure does
    settle()
    facet = facet_cached(protocol="a2a")
    with CaptureQueriesContext(connection) as queries:
        again = facet_cached(protocol="a2a")
    assert len(queries) == 0 and again.streaming is True
    again.versions.append("9.9")  # a private copy: what others read is untouched
    assert facet_cached(protocol="a2a").versions == facet.versions == ["1.0"]

    facet_update(protocol="a2a", changes={"streaming": False}, actor="test")
    assert facet_cached(protocol="a2a").streaming is False


def test_the_card_document_is_the_served_card_and_follows_its_sources(listening: None) -> None:
    card_document_cached()  # seeds the facet and the skill routes
    settle()
    document = card_document_cached()
    assert document == card_document_of(*public_card_current())
    with CaptureQueriesContext(connection) as queries:
        assert card_document_cached() == document
    assert len(queries) == 0

    before = cache_generation(TOPIC_CARD)
    SkillRoute.objects.filter(is_default=True).update(description="A new description")
    assert invalidated(TOPIC_CARD, before)
    changed = card_document_cached()
    assert b"A new description" in changed.body and changed.etag != document.etag

    facet_update(protocol="a2a", changes={"streaming": False}, actor="test")
    assert b'"streaming":false' in card_document_cached().body


def test_the_per_agent_card_is_cached_for_found_agents_only(listening: None) -> None:
    _, raw = api_key()  # the tenant's creation hook seeds its demo agent and workflows
    public_card_current()
    settle()
    subject = subject_from_authorization_cached(f"Bearer {raw}")
    demo = Agent.objects.for_tenant(subject.tenant_pk).get(agent_id=DEMO_AGENT_ID)
    r = a2a_tenant_of(agent=demo)
    entry = agent_by_a2a_tenant(subject=subject, a2a_tenant=r)
    assert entry is not None
    expected = agent_card(host_card=public_card_current()[0], entry=entry)
    agent_card_cached(subject=subject, a2a_tenant=r)
    with CaptureQueriesContext(connection) as queries:
        assert agent_card_cached(subject=subject, a2a_tenant=r) == expected
    assert len(queries) == 0
    assert agent_card_cached(subject=subject, a2a_tenant="x" * len(r)) is None

    before = cache_generation(TOPIC_CARD)
    Agent.objects.for_tenant(subject.tenant_pk).filter(pk=demo.pk).update(persona="Renamed")
    assert invalidated(TOPIC_CARD, before)
    renamed = agent_card_cached(subject=subject, a2a_tenant=r)
    assert renamed is not None and renamed.name == "Renamed"


async def on_thread(read: Callable[[], Any]) -> Any:
    """A database call from an async test, its thread's connection closed afterwards."""

    def run() -> Any:
        try:
            return read()
        finally:
            connections.close_all()

    return await sync_to_async(run, thread_sensitive=False)()


def refusing(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a hit must not load")


async def test_the_async_variants_hit_on_the_loop_and_follow_a_revocation(
    listening: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        key, raw = await on_thread(api_key)
        await on_thread(public_card_current)  # seeds the facet and the skill routes
        await on_thread(settle)
        header = f"Bearer {raw}"
        subject = await asubject_from_authorization_cached(header)
        facet = await afacet_cached(protocol="a2a")
        document = await acard_document_cached()
        assert subject.tenant_pk == key.tenant_id and facet.protocol == "a2a"

        with monkeypatch.context() as patched:  # every hit now: a load would raise
            patched.setattr(tenant_selectors, "subject_from_api_key", refusing)
            patched.setattr(facet_services, "facet_ensure", refusing)
            patched.setattr(card_module, "_card_document_build", refusing)
            assert await asubject_from_authorization_cached(header) == subject
            assert (await afacet_cached(protocol="a2a")).versions == facet.versions
            assert await acard_document_cached() == document

        await on_thread(lambda: api_key_revoke(api_key=key))
        with pytest.raises(CredentialRevoked):
            await asubject_from_authorization_cached(header)
    finally:  # the misses loaded on asgiref's shared thread: close its connection
        await sync_to_async(connections.close_all)()
