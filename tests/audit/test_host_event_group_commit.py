"""`host_event_append_batched`: concurrent appends share one statement and one commit, each caller
returns only once its row is committed, and every stream stays gap-free, the ORM path's appends
included (DESIGN.md §The hot path; interop.md §The audit event).

Each scenario runs on a fresh event loop with its own pool, outside the test's transaction
(`transaction=True`): the pool's connections cannot see an uncommitted test transaction."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import psycopg
import pytest
from django.db import connection, transaction

from apps.audit import group_commit, services
from apps.audit.errors import HostEventDeliveryMismatch, UnregisteredHostEventType
from apps.audit.group_commit import host_event_append_batched, host_event_batcher
from apps.audit.host_event_types import HOST_TEST_TYPES, NEGOTIATION_DECIDED, Delivery
from apps.audit.models import HostEvent, HostEventStream
from apps.audit.services import host_event_append
from apps.audit.streams import host_event_wake_group
from apps.core.async_db import async_pool_close, conninfo
from apps.core.group_commit import GroupCommitStats
from apps.facets.negotiation import (
    Decision,
    negotiation_record,
    negotiation_record_batched,
)
from apps.tenants.models import Tenant
from apps.tenants.subject import Subject

pytestmark = [
    pytest.mark.django_db(transaction=True),
]

T = TypeVar("T")
PEER = "https://peer-agent.example.net:8443/a2a/jsonrpc"
ACCEPTED = Decision("a2a", "accepted", "ok", "1.0", "1.0", "1.0", "1.0", ("1.0",))


def _on_fresh_loop(scenario: Callable[[], Awaitable[T]]) -> tuple[T, GroupCommitStats]:
    """Run `scenario` on a new loop (its own batcher and pool); return its result and the batcher's
    stats, after everything queued is written and the pool is closed."""

    async def main() -> tuple[T, GroupCommitStats]:
        try:
            result = await scenario()
            await host_event_batcher().drain()
            return result, host_event_batcher().stats
        finally:
            await async_pool_close()

    return asyncio.run(main())


def _sequences(subject: Subject) -> list[int]:
    rows = HostEvent.unscoped_all_tenants.filter(tenant__slug=subject.tenant, subject_id=subject.subject_id)
    return list(rows.order_by("sequence").values_list("sequence", flat=True))


def _counter(subject: Subject) -> int:
    stream = HostEventStream.unscoped_all_tenants.get(tenant__slug=subject.tenant, subject_id=subject.subject_id)
    return int(stream.last_sequence)


@pytest.fixture
def subjects(make_subject) -> Iterator[Callable[..., Subject]]:  # type: ignore[no-untyped-def]
    yield lambda slug="acme": make_subject(slug)[1]
    connection.close()  # the test's own connection; the threads below close theirs


def test_concurrent_exchanges_leave_one_record_each_in_fewer_commits(subjects) -> None:  # type: ignore[no-untyped-def]
    alice = subjects()
    n = 50

    async def scenario() -> list[Any]:
        return await asyncio.gather(
            *(negotiation_record_batched(ACCEPTED, peer_origin=PEER, subject=alice) for _ in range(n))
        )

    _, stats = _on_fresh_loop(scenario)
    assert _sequences(alice) == list(range(1, n + 1))  # exactly n, consecutive, no duplicates
    assert _counter(alice) == n
    assert stats.records == n
    assert 1 <= stats.commits < n  # shared commits, one row per exchange
    events = HostEvent.unscoped_all_tenants.filter(subject_id=alice.subject_id)
    assert len({e.event_id for e in events}) == n
    assert {e.type for e in events} == {NEGOTIATION_DECIDED} and all(e.durable for e in events)


def test_interleaved_subjects_and_tenants_each_stay_gap_free(subjects) -> None:  # type: ignore[no-untyped-def]
    alice, bob, carol = subjects("acme"), subjects("acme"), subjects("globex")
    # A Subject built without its tenant pk (not from a key): the batcher looks it up.
    carol_by_slug = dataclasses.replace(carol, tenant_pk=None)
    assert carol_by_slug.tenant_pk is None
    order = [alice, bob, carol_by_slug, alice, carol, bob, alice]
    waves, per_wave = 4, 35

    async def scenario() -> list[str]:
        ids: list[str] = []
        for wave in range(waves):
            ids += await asyncio.gather(
                *(
                    host_event_append_batched(
                        subject=order[(wave + i) % len(order)], type=NEGOTIATION_DECIDED, payload={"w": wave, "i": i}
                    )
                    for i in range(per_wave)
                )
            )
        return ids

    ids, stats = _on_fresh_loop(scenario)
    assert len(set(ids)) == waves * per_wave == stats.records
    expected = {s.subject_id: 0 for s in (alice, bob, carol)}
    for wave in range(waves):
        for i in range(per_wave):
            expected[order[(wave + i) % len(order)].subject_id] += 1
    for subject in (alice, bob, carol):
        count = expected[subject.subject_id]
        assert _sequences(subject) == list(range(1, count + 1))
        assert _counter(subject) == count
    assert (
        HostEvent.unscoped_all_tenants.filter(subject_id=carol.subject_id, tenant__slug="globex").count()
        == (expected[carol.subject_id])
    )
    # Within a stream, sequence order is arrival order (each wave's payloads in submission order).
    alice_rows = HostEvent.unscoped_all_tenants.filter(subject_id=alice.subject_id).order_by("sequence")
    arrivals = [(e.payload["w"], e.payload["i"]) for e in alice_rows]
    assert arrivals == sorted(arrivals)
    assert stats.commits < waves * per_wave


def test_a_record_is_readable_from_another_connection_when_the_await_returns(subjects) -> None:  # type: ignore[no-untyped-def]
    alice = subjects()
    seen: list[tuple[str, int, list[int]]] = []

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as other:

            async def exchange(i: int) -> None:
                event_id = await host_event_append_batched(subject=alice, type=NEGOTIATION_DECIDED, payload={"i": i})
                # Read at once, on a connection that is neither the pool's nor the test's.
                async with other.cursor() as cursor:
                    await cursor.execute("SELECT sequence FROM audit_hostevent WHERE event_id = %s", [event_id])
                    row = await cursor.fetchone()
                    assert row is not None, f"{event_id} is not visible to another connection"
                    await cursor.execute(
                        "SELECT sequence FROM audit_hostevent WHERE subject_id = %s AND sequence <= %s"
                        " ORDER BY sequence",
                        [alice.subject_id, row[0]],
                    )
                    seen.append((event_id, row[0], [r[0] for r in await cursor.fetchall()]))

            for _ in range(3):
                await asyncio.gather(*(exchange(i) for i in range(20)))

    _on_fresh_loop(scenario)
    assert len(seen) == 60
    for _, sequence, visible in seen:
        assert visible == list(range(1, sequence + 1))  # never n+1 visible before n


def test_the_orm_path_appends_to_the_same_streams_concurrently_without_gaps(subjects) -> None:  # type: ignore[no-untyped-def]
    """`host_event_append` (a sync service in its own thread and connection) and the batches race on
    the same two streams for as long as the thread writes: no gap, no duplicate, no deadlock."""
    alice, bob = subjects(), subjects()
    orm_appends, per_wave = 60, 30
    errors: list[BaseException] = []
    first_written = threading.Event()

    def orm_writer() -> None:
        try:
            for i in range(orm_appends):
                with transaction.atomic(durable=True):
                    subject = alice if i % 3 else bob
                    host_event_append(subject=subject, type=NEGOTIATION_DECIDED, payload={"orm": i}, durable=True)
                first_written.set()
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            first_written.set()
            connection.close()

    async def scenario() -> int:
        thread = threading.Thread(target=orm_writer)
        thread.start()
        await asyncio.to_thread(first_written.wait, 10)
        waves = 0
        while thread.is_alive() or waves < 3:  # batches for the whole life of the ORM writer
            batch = (
                host_event_append_batched(
                    subject=(alice, bob)[(waves + i) % 2], type=NEGOTIATION_DECIDED, payload={"b": i}
                )
                for i in range(per_wave)
            )
            await asyncio.wait_for(asyncio.gather(*batch), timeout=30)  # a deadlock fails here, not hangs
            waves += 1
        await asyncio.to_thread(thread.join, 30)
        return waves

    waves, stats = _on_fresh_loop(scenario)
    assert errors == []
    batched = waves * per_wave
    assert stats.records == batched
    total = {alice.subject_id: len([i for i in range(orm_appends) if i % 3]) + batched // 2}
    total[bob.subject_id] = orm_appends + batched - total[alice.subject_id]
    for subject in (alice, bob):
        assert _sequences(subject) == list(range(1, total[subject.subject_id] + 1))
        assert _counter(subject) == total[subject.subject_id]
    # The two paths really interleaved on a stream (not all of one, then all of the other).
    kinds = [
        "orm" in e.payload
        for e in HostEvent.unscoped_all_tenants.filter(subject_id=alice.subject_id).order_by("sequence")
    ]
    switches = sum(1 for a, b in itertools.pairwise(kinds) if a != b)
    assert switches >= 2, kinds


def test_a_failing_batch_fails_every_waiter_and_leaves_no_gap(subjects, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    alice = subjects()
    real_mint = services.mint_opaque  # the one that mints every appended event's id
    minted = 0

    def mint_one_bad() -> str:
        nonlocal minted
        minted += 1
        return "not an id!" if minted == 5 else real_mint()  # fails the hostevent_event_id CHECK

    async def scenario() -> list[Any]:
        await host_event_append_batched(subject=alice, type=NEGOTIATION_DECIDED, payload={"before": True})
        monkeypatch.setattr(services, "mint_opaque", mint_one_bad)
        outcomes = await asyncio.gather(
            *(host_event_append_batched(subject=alice, type=NEGOTIATION_DECIDED, payload={"i": i}) for i in range(10)),
            return_exceptions=True,
        )
        monkeypatch.setattr(services, "mint_opaque", real_mint)
        await host_event_append_batched(subject=alice, type=NEGOTIATION_DECIDED, payload={"after": True})
        return outcomes

    outcomes, stats = _on_fresh_loop(scenario)
    assert all(isinstance(o, psycopg.errors.CheckViolation) for o in outcomes), outcomes  # all ten, one batch
    assert stats.failures == 1
    assert _sequences(alice) == [1, 2]  # the one before and the one after, nothing of the failed batch
    assert _counter(alice) == 2
    payloads = [
        e.payload for e in HostEvent.unscoped_all_tenants.filter(subject_id=alice.subject_id).order_by("sequence")
    ]
    assert payloads == [{"before": True}, {"after": True}]


def test_what_the_orm_path_refuses_is_refused_before_queueing(subjects) -> None:  # type: ignore[no-untyped-def]
    alice = subjects()

    async def scenario() -> None:
        with pytest.raises(UnregisteredHostEventType):
            await host_event_append_batched(subject=alice, type="nobody.registered-this", payload={})
        with pytest.raises(HostEventDeliveryMismatch):  # ephemeral: nothing to await a commit for
            await host_event_append_batched(subject=alice, type=HOST_TEST_TYPES[Delivery.EPHEMERAL], payload={})
        with pytest.raises(TypeError):
            await host_event_append_batched(subject=alice, type=NEGOTIATION_DECIDED, payload=["no"])  # type: ignore[arg-type]
        with pytest.raises(TypeError):  # not JSON: fails its own caller, not a batch
            await host_event_append_batched(subject=alice, type=NEGOTIATION_DECIDED, payload={"x": object()})

    _, stats = _on_fresh_loop(scenario)
    assert stats.flushes == 0
    assert _sequences(alice) == []


def test_an_unknown_tenant_fails_its_own_waiter_only(subjects) -> None:  # type: ignore[no-untyped-def]
    alice = subjects()
    ghost = Subject(issuer="x", subject_id="ghost-subject", tenant="no-such-tenant", kind="user")

    async def scenario() -> list[Any]:
        return await asyncio.gather(
            host_event_append_batched(subject=alice, type=NEGOTIATION_DECIDED, payload={}),
            host_event_append_batched(subject=ghost, type=NEGOTIATION_DECIDED, payload={}),
            host_event_append_batched(subject=alice, type=NEGOTIATION_DECIDED, payload={}),
            return_exceptions=True,
        )

    outcomes, _ = _on_fresh_loop(scenario)
    assert isinstance(outcomes[0], str) and isinstance(outcomes[2], str)
    assert isinstance(outcomes[1], Tenant.DoesNotExist)  # as the ORM path raises
    assert _sequences(alice) == [1, 2]


def test_a_cancelled_caller_still_leaves_its_record(subjects) -> None:  # type: ignore[no-untyped-def]
    alice = subjects()

    async def scenario() -> None:
        task = asyncio.create_task(negotiation_record_batched(ACCEPTED, peer_origin=PEER, subject=alice))
        await asyncio.sleep(0)  # it runs up to its await: decided and queued
        task.cancel()  # the client went away
        with pytest.raises(asyncio.CancelledError):
            await task

    _on_fresh_loop(scenario)
    assert _sequences(alice) == [1]


def test_one_caller_after_another_each_gets_its_record(subjects) -> None:  # type: ignore[no-untyped-def]
    """Each caller appends as soon as the one before it returned, which is before the flusher that
    wrote the previous row has finished: the new row must start a flush of its own or join one."""
    alice = subjects()
    n = 20

    async def scenario() -> list[str]:
        async def in_turn() -> list[str]:
            return [
                await host_event_append_batched(subject=alice, type=NEGOTIATION_DECIDED, payload={"i": i})
                for i in range(n)
            ]

        return await asyncio.wait_for(in_turn(), timeout=60)  # a lost row fails here, not hangs

    ids, stats = _on_fresh_loop(scenario)
    assert len(set(ids)) == n == stats.records
    assert _sequences(alice) == list(range(1, n + 1))


def test_appends_arriving_as_a_flusher_finishes_are_all_written(subjects) -> None:  # type: ignore[no-untyped-def]
    """Arrivals staggered by a fraction of a commit: many land just as a flusher empties the queue
    and ends. Each must still be written (a flusher that ends while still counted as running, so
    that nobody starts the next one, left such a row unwritten and its caller waiting forever)."""
    alice = subjects()
    n = 300

    async def one(i: int) -> str:
        await asyncio.sleep((i % 40) * 0.0004 + (i // 40) * 0.004)
        return await host_event_append_batched(subject=alice, type=NEGOTIATION_DECIDED, payload={"i": i})

    async def scenario() -> list[str]:
        # Bounded: a lost row fails the test here instead of hanging it.
        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(n))), timeout=120)

    ids, stats = _on_fresh_loop(scenario)
    assert len(set(ids)) == n == stats.records
    assert _sequences(alice) == list(range(1, n + 1))
    assert stats.commits > 1  # the arrivals really were spread over several flushes


def test_one_wake_up_per_stream_after_the_commit(subjects, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    alice, bob = subjects(), subjects()
    woken: list[str] = []

    async def scenario() -> None:
        # Counters exist first, so the 20 below go in a single statement.
        await asyncio.gather(
            *(host_event_append_batched(subject=s, type=NEGOTIATION_DECIDED, payload={}) for s in (alice, bob))
        )
        monkeypatch.setattr(group_commit, "publish_wake_from_loop", woken.append)
        await asyncio.gather(
            *(
                host_event_append_batched(subject=(alice, bob)[i % 2], type=NEGOTIATION_DECIDED, payload={"i": i})
                for i in range(20)
            )
        )

    _, stats = _on_fresh_loop(scenario)
    groups = {host_event_wake_group(tenant=s.tenant, subject_id=s.subject_id) for s in (alice, bob)}
    assert sorted(woken) == sorted(groups)  # one each, not one per record
    assert stats.commits == 2  # the two first records (whose counters were created), then all 20 at once


def test_the_batched_record_is_the_orm_paths_record(subjects, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    alice = subjects()
    refused = Decision(
        "mcp", "refused", "below-floor", None, "2024-11-05", "2025-06-18", "2025-11-25", ("2025-06-18", "2025-11-25")
    )
    from django.utils import timezone

    frozen = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: frozen)  # the payload's `at` and the row's `at`
    for decision in (ACCEPTED, refused):
        negotiation_record(decision, peer_origin=PEER, subject=alice)

        async def batched(decision: Decision = decision) -> None:
            await negotiation_record_batched(decision, peer_origin=PEER, subject=alice)

        _on_fresh_loop(batched)
    with psycopg.connect(conninfo()) as other:
        rows = other.execute(
            "SELECT tenant_id, subject_id, subject::text, type, payload::text, durable, at, sequence"
            " FROM audit_hostevent WHERE subject_id = %s ORDER BY sequence",
            [alice.subject_id],
        ).fetchall()
    assert [r[-1] for r in rows] == [1, 2, 3, 4]
    orm_accepted, batched_accepted, orm_refused, batched_refused = (r[:-1] for r in rows)
    assert batched_accepted == orm_accepted
    assert batched_refused == orm_refused
    assert orm_accepted != orm_refused
    events = list(HostEvent.unscoped_all_tenants.filter(subject_id=alice.subject_id).order_by("sequence"))
    wire = [{k: v for k, v in e.as_wire().items() if k != "eventId"} for e in events]
    assert wire[0] == wire[1] and wire[2] == wire[3]


def test_a_slow_flush_is_logged_with_its_size(subjects, caplog) -> None:  # type: ignore[no-untyped-def]
    """A flush that waits (here: another session holds the table locked for 300 ms) leaves one
    warning with the batch size and the queue behind it, and counts in `slow_flushes`; the records
    still commit. The trail a stall would leave (bench/README.md, the session-7 stall)."""
    alice = subjects()

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(conninfo()) as locker:
            await locker.execute("LOCK TABLE audit_hostevent IN EXCLUSIVE MODE")
            writes = asyncio.gather(
                *(
                    host_event_append_batched(subject=alice, type=NEGOTIATION_DECIDED, payload={"i": i})
                    for i in range(5)
                )
            )
            await asyncio.sleep(0.3)
            await locker.commit()  # the lock goes; the waiting flush commits
            await writes

    with caplog.at_level("WARNING", logger="apps.core.group_commit"):
        _, stats = _on_fresh_loop(scenario)
    assert _sequences(alice) == [1, 2, 3, 4, 5]
    assert stats.slow_flushes >= 1
    slow = [r.getMessage() for r in caplog.records if "group commit: a flush of" in r.getMessage()]
    assert slow and all("ms (" in message for message in slow), slow
