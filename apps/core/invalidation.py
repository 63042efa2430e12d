"""Per-process caches that every database write empties in every process (DESIGN.md §The hot path).

The protocol doors read the same few rows on every request: the API key behind the bearer
credential, the facet, the card's sources. They may keep them per process only because a write to
any of those tables, through any path (services, the admin, bulk SQL, cascades, a test flush),
empties the matching cache in every process:

- **Triggers, not call sites.** Each source table has a statement-level trigger
  (`invalidation_trigger`, installed by its app's migration) running
  `pg_notify('openwop_invalidate', '<topic>')`. PostgreSQL delivers a notification only when the
  writing transaction commits, and never for a rolled-back one.
- **A listener thread per process** holds its own psycopg connection (`LISTEN openwop_invalidate`)
  and drops a topic's entries the moment its notification arrives. A thread, not an asyncio task:
  it wakes however busy the event loop is.
- **Cached only while listening.** Before the LISTEN is established, after the connection drops
  (notifications sent meanwhile are lost) and until it is back (which empties every topic), every
  lookup goes to its loader.
- **A generation per topic** closes the loader race: a value read before a commit whose
  notification lands while the loader is still running is not stored (the notification already
  came and went, so nothing else would ever drop it).
- **Committed reads only.** Inside an atomic block the caller may be reading its own uncommitted
  writes (or a test's rolled-back data): the cache is bypassed, neither read nor filled.

Topics and the tables whose triggers empty them: `apikey` (sha256 of the raw key -> Subject,
and of a verified access token -> Subject): tenants_apikey, tenants_tenant, oauth_trustedissuer,
oauth_trustedissuer_allowed_tenants; `facet` (protocol -> Facet, and ("policy", tenant slug) -> the
tenant's version policies): facets_facet, facets_versionpolicy; `card` (the public card document
and per-agent cards, signed, and the JWKS): facets_facet, facets_versionpolicy, a2a_skillroute, a2a_skillroutepin,
agents_agent, agents_workflow, tenants_tenant, a2a_cardsigningkey,
oauth_trustedissuer (the card's security schemes), oauth_trustedissuer_allowed_tenants; `budget` (tenant pk ->
its effective budgets): tenants_tenantbudget. The readers are
`tenants.selectors.subject_from_authorization_cached`, `tenants.budgets.tenant_budget`, `facets.services.facet_cached`,
`facets.policy.tenant_floors_cached` and `a2a.card.card_document_cached` (each with an async twin).

What "the next request" means: a request that starts after the notification reached the process.
PostgreSQL signals the listening backends before the writer's COMMIT returns, so the window is the
delivery latency to this process (sub-millisecond on a LAN), not a TTL. In the writer's own
process, the services that revoke or edit (`api_key_revoke`, `facet_update`) also call
`invalidate_local` on commit, so there the next statement already sees the change. A connection
that dies silently is noticed by a heartbeat (every HEARTBEAT_SECONDS, TCP user timeout 10 s);
until then a partitioned process cannot write its requests' records either.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

import psycopg
from django.db import connection, migrations, transaction

from apps.core.append_only import on_postgresql
from apps.core.async_db import conninfo, joins_django_transaction

logger = logging.getLogger(__name__)

T = TypeVar("T")

CHANNEL = "openwop_invalidate"

TOPIC_APIKEY = "apikey"  # sha256(raw key) -> Subject: API keys, tenants
TOPIC_FACET = "facet"  # protocol -> Facet: facets; ("policy", tenant) -> version policies
TOPIC_CARD = "card"  # the card documents: facets, skill routes, agents, workflows
TOPIC_BUDGET = "budget"  # tenant pk -> its effective budgets: tenant budgets
TOPICS = (TOPIC_APIKEY, TOPIC_FACET, TOPIC_CARD, TOPIC_BUDGET)

MAX_ENTRIES_PER_TOPIC = 10_000  # an unbounded key space (API keys) must not grow without end
POLL_SECONDS = 1.0  # how long one wait for notifications lasts (bounds a stop's latency)
HEARTBEAT_SECONDS = 5.0  # a query on an idle connection, so a dead one is noticed
BACKOFF_FIRST_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 30.0

_MISSING = object()


class _State:
    """Everything the listener and the lookups share, guarded by one lock (dict ops from threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)  # notified on every invalidation and (dis)connect
        self.entries: dict[str, dict[Hashable, Any]] = {topic: {} for topic in TOPICS}
        self.generation: dict[str, int] = dict.fromkeys(TOPICS, 0)
        self.listening = False  # LISTEN established and the connection alive: caching allowed
        self.last_notification: str | None = None
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()
        self.shut_down = False
        self.pid = os.getpid()


_state = _State()


def _reset_after_fork() -> None:
    # A forked child inherits the dicts but not the listener thread: it starts over, uncached.
    global _state
    _state = _State()


os.register_at_fork(after_in_child=_reset_after_fork)


# ---------------------------------------------------------------------------------------------
# Lookups


def _cacheable_here() -> bool:
    """Not inside an atomic block: the read may see uncommitted (or to-be-rolled-back) rows.

    On an event loop's thread no ORM runs (Django refuses it), so no block can be open there and
    the check, which would build a connection object per request context, is skipped, unless the
    loop's statements join Django's transaction (a `db` test: apps/core/async_db.py)."""
    if asyncio._get_running_loop() is not None:
        return not joins_django_transaction()
    return not connection.in_atomic_block


def _lookup(topic: str, key: Hashable) -> tuple[Any, int | None]:
    """(the cached value or _MISSING, the generation to store under or None when not storable)."""
    if not _cacheable_here():
        return _MISSING, None
    state = _state
    if state.thread is None or state.pid != os.getpid():
        _listener_start()
        state = _state
    with state.lock:
        if not state.listening:
            return _MISSING, None
        return state.entries[topic].get(key, _MISSING), state.generation[topic]


def _store(topic: str, key: Hashable, value: Any, generation: int) -> None:
    state = _state
    with state.lock:
        # Not if a notification (or a reconnect) came while the loader ran: it may have read
        # the rows as they were before that commit.
        if not state.listening or state.generation[topic] != generation:
            return
        entries = state.entries[topic]
        if key not in entries and len(entries) >= MAX_ENTRIES_PER_TOPIC:
            del entries[next(iter(entries))]  # the oldest stored
        entries[key] = value


def cached(topic: str, key: Hashable, loader: Callable[[], T]) -> T:
    """`loader()`'s value for (topic, key), from this process's cache while it can be trusted.

    A hit is a dict read under a lock: no I/O, callable from the event loop. Only a value the
    loader returns is stored; an exception passes through and stores nothing (so only positive
    resolutions are ever cached)."""
    value, generation = _lookup(topic, key)
    if value is _MISSING:
        value = loader()
        if generation is not None:
            _store(topic, key, value, generation)
    return value


async def acached(topic: str, key: Hashable, loader: Callable[[], Awaitable[T]]) -> T:
    """`cached` for an async loader (the doors' psycopg reads): a hit never awaits anything."""
    value, generation = _lookup(topic, key)
    if value is _MISSING:
        value = await loader()
        if generation is not None:
            _store(topic, key, value, generation)
    return value


def lookup(topic: str, key: Hashable) -> tuple[Any, int | None]:
    """(the cached value, or None when absent; the generation to `store` under, or None when
    nothing may be stored now): for a cache filled by someone other than a loader (apps.core.rate_limits'
    bucket -> tenant table, filled where a key authenticates). A dict read, no I/O."""
    value, generation = _lookup(topic, key)
    return (None if value is _MISSING else value), generation


def store(topic: str, key: Hashable, value: Any, generation: int) -> None:
    """Keep `value` for (topic, key) unless `topic` was invalidated since `generation` was read."""
    _store(topic, key, value, generation)


def secret_cache_key(raw: str) -> str:
    """The key a secret is cached under: its SHA-256, so no cache ever holds the raw value."""
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def invalidate_local(*topics: str) -> None:
    """Drop `topics` (every topic when none or an unknown one is named) in this process.

    The listener calls it for each notification; a service may also call it on commit, so its own
    process sees the change on the very next statement, before the notification is back."""
    known = all(topic in TOPICS for topic in topics)
    _drop(_state, topics if topics and known else TOPICS)


def _drop(state: _State, topics: tuple[str, ...], listening: bool | None = None) -> None:
    """Empty `topics` and bump their generations (refusing stores from loaders already running),
    setting `listening` on the way when given; then wake `wait_for`."""
    with state.lock:
        if listening is not None:
            state.listening = listening
        for topic in topics:
            state.entries[topic].clear()
            state.generation[topic] += 1
        state.changed.notify_all()


def invalidate_on_commit(*topics: str) -> None:
    """`invalidate_local(*topics)` when the current transaction commits (now, outside one)."""
    transaction.on_commit(lambda: invalidate_local(*topics))


# ---------------------------------------------------------------------------------------------
# Introspection, for tests and health checks


def cache_listening() -> bool:
    """True while the listener holds its LISTEN (the caches are in use)."""
    return _state.listening


def cache_generation(topic: str) -> int:
    """How many times `topic` was invalidated in this process (notifications, reconnects, local)."""
    return _state.generation[topic]


def cache_size(topic: str) -> int:
    return len(_state.entries[topic])


def last_notification() -> str | None:
    """The payload of the last notification received (a test's barrier: notifications arrive
    in commit order, so once its own is back, every earlier commit's has been applied)."""
    return _state.last_notification


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    """Block until `predicate()` holds (re-checked at each invalidation or (dis)connect) or the
    timeout passes; returns the predicate's last value. For tests: no sleep-and-hope."""
    state = _state
    with state.changed:
        return state.changed.wait_for(predicate, timeout=timeout)


# ---------------------------------------------------------------------------------------------
# The listener


def _conninfo() -> str:
    """The listener's connection string (a test points it at nowhere): PostgreSQL itself, since
    LISTEN through a transaction pooler hears nothing (settings.OPENWOP_DB_TRANSACTION_POOLER)."""
    return conninfo(direct=True)


def listener_application_name(pid: int | None = None) -> str:
    """The listener connection's `application_name` (pg_stat_activity shows whose it is)."""
    return f"openwop-invalidation:{pid if pid is not None else os.getpid()}"


def _listener_start() -> None:
    """Start this process's listener once (first lookup), never after shut-down."""
    state = _state
    with state.lock:
        if state.shut_down or (state.thread is not None and state.pid == os.getpid()):
            return
        state.pid = os.getpid()
        thread = threading.Thread(target=_listen_forever, args=(state,), name="openwop-invalidation", daemon=True)
        state.thread = thread
    thread.start()


def _set_listening(state: _State, listening: bool) -> None:
    # Both ways everything goes: on connect, whatever changed while nobody listened; on
    # disconnect, whatever will change before anybody listens again.
    _drop(state, TOPICS, listening)


def _notified(state: _State, payload: str) -> None:
    if state is not _state:
        return  # a state a fork replaced
    with state.lock:
        state.last_notification = payload
    invalidate_local(payload)  # after: a waiter on the payload sees its invalidation done


def _listen_forever(state: _State) -> None:
    backoff = BACKOFF_FIRST_SECONDS
    while not state.stop.is_set():
        try:
            with psycopg.connect(
                _conninfo(),
                autocommit=True,
                connect_timeout=5,
                application_name=listener_application_name(),
                # A peer that vanished without a FIN must not leave us "listening" for long.
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
                tcp_user_timeout=10_000,
            ) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                _set_listening(state, True)
                backoff = BACKOFF_FIRST_SECONDS
                last_beat = time.monotonic()
                while not state.stop.is_set():
                    for notify in conn.notifies(timeout=POLL_SECONDS):
                        _notified(state, notify.payload)
                    if time.monotonic() - last_beat >= HEARTBEAT_SECONDS:
                        conn.execute("SELECT 1")  # notifications arriving meanwhile are kept
                        last_beat = time.monotonic()
        except Exception as exc:
            if not state.stop.is_set():
                logger.warning(
                    "cache invalidation listener disconnected (%s); caches off until it is back", type(exc).__name__
                )
        finally:
            _set_listening(state, False)
        if state.stop.wait(backoff):
            break
        backoff = min(backoff * 2, BACKOFF_MAX_SECONDS)


def invalidation_shutdown(timeout: float = 5.0) -> None:
    """Stop the listener for good and cache nothing more (a test session before it drops its
    database, which an open connection would block; a server's shutdown)."""
    state = _state
    with state.lock:
        state.shut_down = True
        thread = state.thread
    state.stop.set()
    if thread is not None:
        thread.join(timeout)


# ---------------------------------------------------------------------------------------------
# The database half, for migrations


def invalidation_trigger(table: str, topics: tuple[str, ...]) -> migrations.RunPython:
    """A reversible operation installing `table`'s statement-level trigger that notifies each of
    `topics` on INSERT, UPDATE, DELETE and TRUNCATE."""
    unknown = set(topics) - set(TOPICS)
    if unknown or not topics:
        raise ValueError(f"unknown invalidation topics: {sorted(unknown)}")
    function = f"{table}_invalidate_notify"
    trigger = f"{table}_invalidate"
    notifies = "\n".join(f"            PERFORM pg_notify('{CHANNEL}', '{topic}');" for topic in topics)
    install = [
        f"""
        CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
{notifies}
            RETURN NULL;
        END;
        $$
        """,
        f"DROP TRIGGER IF EXISTS {trigger} ON {table}",
        f"CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
    ]
    uninstall = [f"DROP TRIGGER IF EXISTS {trigger} ON {table}", f"DROP FUNCTION IF EXISTS {function}()"]
    return migrations.RunPython(on_postgresql(install), on_postgresql(uninstall), elidable=False)
