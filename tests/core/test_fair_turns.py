"""Fair turns (apps/core/fair_turns.py): who is served next when a process's turns are all taken.

Orders, never durations: each test holds turns open with events it sets itself, so what is asserted
is which request got a turn, not how long anything took."""

from __future__ import annotations

import asyncio
import time

import pytest

from apps.core import metrics
from apps.core.fair_turns import PRUNE_AT, UNIT_BYTES, UNLEARNED, FairTurns, _Usage, cost_units, turn_key
from apps.core.rate_limits import caller_key


async def _take(turns: FairTurns, tenant: str, served: list[str], release: asyncio.Event, name: str) -> None:
    async with turns.turn(tenant):
        served.append(name)
        await release.wait()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_tenant_alone_has_every_turn_and_one_more_waits() -> None:
    turns = FairTurns(slots=3, hold=0)
    served: list[str] = []
    release = asyncio.Event()
    tasks = [asyncio.create_task(_take(turns, "a", served, release, f"a{n}")) for n in range(4)]
    await _settle()
    assert served == ["a0", "a1", "a2"] and turns.busy == 3 and list(turns.waiting) == ["a"]
    release.set()
    await asyncio.gather(*tasks)
    assert served == ["a0", "a1", "a2", "a3"] and turns.busy == 0 and not turns.waiting


async def test_a_freed_turn_goes_to_the_tenant_that_used_the_least() -> None:
    turns = FairTurns(slots=1, hold=0)
    served: list[str] = []
    first, rest = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_take(turns, "a", served, first, "a-first"))
    await _settle()
    # A's second request arrives before B's; A has used the process (its first request is charged
    # when it ends), B has not: B goes first.
    a_second = asyncio.create_task(_take(turns, "a", served, rest, "a-second"))
    await _settle()
    b = asyncio.create_task(_take(turns, "b", served, rest, "b"))
    await _settle()
    assert served == ["a-first"] and set(turns.waiting) == {"a", "b"}
    first.set()
    await _settle()
    assert served == ["a-first", "b"]
    rest.set()
    await asyncio.gather(holder, a_second, b)
    assert served == ["a-first", "b", "a-second"] and turns.busy == 0


async def test_within_a_tenant_first_come_first_served() -> None:
    turns = FairTurns(slots=1, hold=0)
    served: list[str] = []
    release = asyncio.Event()
    tasks = [asyncio.create_task(_take(turns, "a", served, release, f"a{n}")) for n in range(4)]
    await _settle()
    release.set()
    await asyncio.gather(*tasks)
    assert served == ["a0", "a1", "a2", "a3"]


async def test_a_turn_held_past_hold_is_given_up_and_the_request_goes_on() -> None:
    turns = FairTurns(slots=1, hold=0.05)
    served: list[str] = []
    long, short = asyncio.Event(), asyncio.Event()
    slow = asyncio.create_task(_take(turns, "a", served, long, "a-slow"))
    await _settle()
    b = asyncio.create_task(_take(turns, "b", served, short, "b"))
    for _ in range(200):  # until the holder's timer hands the turn on (an order: b before a-slow ends)
        if served == ["a-slow", "b"]:
            break
        await asyncio.sleep(0.01)
    assert served == ["a-slow", "b"] and not slow.done(), "b is served while a-slow still runs"
    short.set()
    await b
    long.set()
    await slow
    assert turns.busy == 0 and not turns.waiting  # the slow one's end gives nothing back twice


async def test_a_cancelled_waiter_leaves_no_trace() -> None:
    turns = FairTurns(slots=1, hold=0)
    served: list[str] = []
    release = asyncio.Event()
    holder = asyncio.create_task(_take(turns, "a", served, release, "a"))
    await _settle()
    waiting_before = metrics.FAIR_TURNS_WAITING._value.get()
    gone = asyncio.create_task(_take(turns, "b", served, release, "b"))
    await _settle()
    assert metrics.FAIR_TURNS_WAITING._value.get() == waiting_before + 1
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert not turns.waiting and metrics.FAIR_TURNS_WAITING._value.get() == waiting_before
    release.set()
    await holder
    assert served == ["a"] and turns.busy == 0
    # The turn is free: the next request is served at once.
    again = asyncio.Event()
    again.set()
    await _take(turns, "c", served, again, "c")
    assert served == ["a", "c"] and turns.busy == 0


async def test_a_waiter_cancelled_as_it_is_handed_the_turn_hands_it_on() -> None:
    turns = FairTurns(slots=1, hold=0)
    served: list[str] = []
    first, rest = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_take(turns, "a", served, first, "a"))
    await _settle()
    unlucky = asyncio.create_task(_take(turns, "b", served, rest, "b"))
    next_one = asyncio.create_task(_take(turns, "c", served, rest, "c"))
    await _settle()
    first.set()
    await asyncio.sleep(0)  # the holder ends and hands the turn to b's future ...
    unlucky.cancel()  # ... which is cancelled before it runs
    await asyncio.gather(holder, unlucky, return_exceptions=True)
    rest.set()
    await next_one
    assert served == ["a", "c"] and turns.busy == 0 and not turns.waiting


async def test_no_slots_means_no_turns() -> None:
    turns = FairTurns(slots=0, hold=0)
    served: list[str] = []
    release = asyncio.Event()
    tasks = [asyncio.create_task(_take(turns, "a", served, release, f"a{n}")) for n in range(50)]
    await _settle()
    assert len(served) == 50 and turns.busy == 0
    release.set()
    await asyncio.gather(*tasks)


def test_usage_halves_and_the_table_is_pruned() -> None:
    turns = FairTurns(slots=1, hold=0)
    turns._charge("a", 4.0, now=100.0)
    assert turns._used("a", 102.0) == pytest.approx(2.0)  # one half-life later
    for n in range(PRUNE_AT):
        turns.usage[f"old{n}"] = _Usage(units=1.0, at=0.0)  # long decayed
    turns._charge("new", 1.0, now=100.0)
    assert set(turns.usage) == {"a", "new"}


def test_a_request_is_charged_for_what_it_answered() -> None:
    assert cost_units(0) == 1.0
    assert cost_units(UNIT_BYTES * 40) == 41.0


async def test_beside_a_light_tenant_a_heavy_one_holds_fewer_turns_at_once() -> None:
    turns = FairTurns(slots=8, hold=0)
    for _ in range(20):  # their recent requests: A's pages of 40 units, B's single units
        turns._charge("heavy", cost_units(UNIT_BYTES * 39), now=time.monotonic())
        turns._charge("light", cost_units(0), now=time.monotonic())
    served: list[str] = []
    release = asyncio.Event()
    heavy = [asyncio.create_task(_take(turns, "heavy", served, release, f"h{n}")) for n in range(8)]
    await _settle()
    assert served == [f"h{n}" for n in range(8)], "alone, the heavy tenant has every turn"
    light = [asyncio.create_task(_take(turns, "light", served, release, f"l{n}")) for n in range(4)]
    await _settle()
    assert turns.cap("heavy") == 1 and turns.cap("light") == 7
    assert served[8:] == [], "every turn is held: the light tenant waits for the next free one"
    release.set()
    await asyncio.gather(*heavy, *light)
    # As the heavy tenant's eight end, the light one's four start first (least used, under its cap).
    assert served[8:12] == ["l0", "l1", "l2", "l3"], served
    assert turns.busy == 0 and not turns.held and not turns.waiting


async def test_a_capped_tenant_waits_while_a_turn_is_free_and_starts_when_alone_again() -> None:
    turns = FairTurns(slots=4, hold=0)
    for _ in range(20):
        turns._charge("heavy", cost_units(UNIT_BYTES * 99), now=time.monotonic())
    served: list[str] = []
    light_done, heavy_done = asyncio.Event(), asyncio.Event()
    light = asyncio.create_task(_take(turns, "light", served, light_done, "l"))
    await _settle()
    heavy = [asyncio.create_task(_take(turns, "heavy", served, heavy_done, f"h{n}")) for n in range(3)]
    await _settle()
    assert served == ["l", "h0"] and turns.busy == 2, "beside the light tenant, one heavy turn at a time"
    light_done.set()
    await light
    await _settle()
    assert served == ["l", "h0", "h1", "h2"], "alone again, it has every turn"
    heavy_done.set()
    await asyncio.gather(*heavy)
    assert turns.busy == 0 and not turns.held


def test_keys_whose_tenant_is_not_learned_share_one_turn() -> None:
    # Forged or first-seen tokens: one tenant here, so a flood of them cannot grow the table.
    assert turn_key(caller_key("Bearer never-seen-1")) == turn_key(caller_key("Bearer never-seen-2")) == UNLEARNED
