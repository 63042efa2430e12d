"""Fair turns: a process's requests admitted in turns across tenants, so one tenant's backlog of
requests is not another's queue (issue 49, "one tenant's load never becomes another's").

Without turns, an event-loop process serves whatever arrives, in arrival order: a tenant that
keeps many connections busy with heavy requests (a 100k-run filtered ListTasks) has most of the
process, and a tenant doing light GetTasks beside it queues behind every one of them. With turns,
at most OPENWOP_FAIR_SLOTS requests (A2A on every binding, MCP, REST) are served at once in a
process; past that a request waits for a turn. A request is charged in cost units (one, plus one
per UNIT_BYTES it answered), a tenant's units halved every HALF_LIFE_SECONDS; a freed turn goes to
the waiting tenant that has used the fewest, that tenant's oldest request first. A tenant alone
may hold every turn; beside others, a share of the slots inverse to its recent cost per request
(at least one), so a tenant of heavy requests holds few turns at once. Turns decide who starts;
the requests holding turns still share the one event loop (what that leaves of a light tenant's
latency beside a heavy one: bench/README.md §Fairness).

A turn covers the work, not a wait: a request that holds one longer than OPENWOP_FAIR_HOLD_SECONDS
(a blocking SendMessage, a tools/call waiting for its run) gives it up and goes on without one, so
slow waits never hold the process from others (it is charged what it answered, as any). Streams take
no turn (their slots are budgeted: apps.core.request_limits).

The tenant is the one the per-process bucket cache knows for the key (apps.core.rate_limits
`bucket_tenant`); every key not learned yet (a key's first request, a forged token) shares one
tenant of its own, so the tenants here are bounded by the host's. A request with no
credential takes no turn (health, readiness, metrics, discovery: cheap, and never kept waiting
behind a tenant's load). Nothing here does I/O; per event loop (one per server process).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from django.conf import settings

from apps.core import metrics
from apps.core.rate_limits import bucket_tenant, caller_key

HALF_LIFE_SECONDS = 2.0
UNIT_BYTES = 4096
PER_REQUEST_WEIGHT = 0.2  # of each request in its tenant's moving average of cost per request
# The usage table is pruned of tenants whose decayed usage is below this (units) when it has more
# than PRUNE_AT entries.
PRUNE_BELOW = 1e-4
PRUNE_AT = 1024


def slots() -> int:
    """Requests served at once per process (0: no turns, every request served as it arrives)."""
    return int(getattr(settings, "OPENWOP_FAIR_SLOTS", 8))


def hold_seconds() -> float:
    return float(getattr(settings, "OPENWOP_FAIR_HOLD_SECONDS", 0.5))


@dataclass(eq=False)
class Turn:
    """One request's turn; its door adds the bytes it answered (`answered`), the cost it is charged."""

    tenant: str
    answered: int = 0
    released: bool = False
    timer: asyncio.TimerHandle | None = None


@dataclass
class _Usage:
    units: float = 0.0  # cost units used, halved every HALF_LIFE_SECONDS
    at: float = 0.0
    per_request: float = 1.0  # the tenant's recent cost units per request (a moving average)

    def now(self, now: float) -> float:
        return self.units * 0.5 ** ((now - self.at) / HALF_LIFE_SECONDS)


def cost_units(answered: int) -> float:
    """What a request is charged: one unit, plus one per UNIT_BYTES it answered (building an
    answer is most of a request's work in this process: a full ListTasks page is tens of GetTasks)."""
    return 1.0 + answered / UNIT_BYTES


@dataclass
class FairTurns:
    """The turns of one event loop."""

    slots: int
    hold: float
    busy: int = 0
    waiting: dict[str, deque[asyncio.Future[None]]] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)
    usage: dict[str, _Usage] = field(default_factory=dict)

    @contextlib.asynccontextmanager
    async def turn(self, tenant: str) -> AsyncIterator[Turn]:
        turn = Turn(tenant)
        if self.slots <= 0:
            yield turn
            return
        if tenant not in self.waiting and self._may_start(tenant):
            self._start(tenant)
        else:
            await self._wait(tenant)  # started for it by `_dispatch`
        if self.hold > 0:
            turn.timer = asyncio.get_running_loop().call_later(self.hold, self._give_up, turn)
        try:
            yield turn
        finally:
            if turn.timer is not None:
                turn.timer.cancel()
            self._give_up(turn)

    def _active(self) -> set[str]:
        return set(self.held) | set(self.waiting)

    def cap(self, tenant: str) -> int:
        """The turns `tenant` may hold at once: every one when it is alone; beside others, a share
        of the slots inverse to its cost per request (a tenant of heavy requests holds fewer at
        once, so the light ones' requests do not queue behind its work), at least one."""
        active = self._active() | {tenant}
        if len(active) == 1:
            return self.slots
        weights = {name: 1.0 / self._per_request(name) for name in active}
        return max(1, int(self.slots * weights[tenant] / sum(weights.values())))

    def _may_start(self, tenant: str) -> bool:
        return self.busy < self.slots and self.held.get(tenant, 0) < self.cap(tenant)

    def _start(self, tenant: str) -> None:
        self.busy += 1
        self.held[tenant] = self.held.get(tenant, 0) + 1

    def _stop(self, tenant: str) -> None:
        self.busy -= 1
        left = self.held.get(tenant, 1) - 1
        if left > 0:
            self.held[tenant] = left
        else:
            self.held.pop(tenant, None)

    async def _wait(self, tenant: str) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self.waiting.setdefault(tenant, deque())
        queue.append(future)
        metrics.FAIR_TURNS_WAITING.inc()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._stop(tenant)  # started for it just as it was cancelled: the next one goes
                self._dispatch()
            else:
                with contextlib.suppress(ValueError):
                    queue.remove(future)
                if not queue and self.waiting.get(tenant) is queue:
                    del self.waiting[tenant]
            raise
        finally:
            metrics.FAIR_TURNS_WAITING.dec()

    def _give_up(self, turn: Turn) -> None:
        """The turn ends (its request ended, or it held the turn past `hold`)."""
        if turn.released:
            return
        turn.released = True
        self._stop(turn.tenant)
        self._charge(turn.tenant, cost_units(turn.answered), time.monotonic())
        self._dispatch()

    def _charge(self, tenant: str, units: float, now: float) -> None:
        used = self.usage.get(tenant)
        if used is None:
            if len(self.usage) >= PRUNE_AT:
                self.usage = {name: u for name, u in self.usage.items() if u.now(now) >= PRUNE_BELOW}
            used = self.usage[tenant] = _Usage(per_request=units)
        used.units, used.at = used.now(now) + units, now
        used.per_request += (units - used.per_request) * PER_REQUEST_WEIGHT

    def _used(self, tenant: str, now: float) -> float:
        used = self.usage.get(tenant)
        return 0.0 if used is None else used.now(now)

    def _per_request(self, tenant: str) -> float:
        used = self.usage.get(tenant)
        return 1.0 if used is None else max(used.per_request, 1.0)

    def _dispatch(self) -> None:
        """Free turns to waiting requests: each to the least-served tenant still under its cap,
        that tenant's oldest request first."""
        now = time.monotonic()
        while self.busy < self.slots and self.waiting:
            ready = [name for name in self.waiting if self.held.get(name, 0) < self.cap(name)]
            if not ready:
                return
            tenant = min(ready, key=lambda name: self._used(name, now))
            queue = self.waiting[tenant]
            future = queue.popleft()
            if not queue:
                del self.waiting[tenant]
            if not future.done():
                self._start(tenant)
                future.set_result(None)


# The turns of every key whose tenant this process has not learned yet: a key's first request, and
# any token that never authenticates (a flood of forged tokens is one tenant here, not thousands).
UNLEARNED = "unlearned"


def turn_key(bucket: str) -> str:
    """Whose turn a request takes: its key's tenant when this process knows it, else UNLEARNED."""
    tenant = bucket_tenant(bucket)
    return f"tenant:{tenant.pk}" if tenant is not None else UNLEARNED


_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FairTurns] = weakref.WeakKeyDictionary()


def fair_turns() -> FairTurns:
    """This event loop's turns (made on first use with the settings then in force)."""
    loop = asyncio.get_running_loop()
    turns = _turns.get(loop)
    if turns is None:
        turns = _turns[loop] = FairTurns(slots=slots(), hold=hold_seconds())
    return turns


def turn_for(authorization: str | None, *, stream: bool) -> contextlib.AbstractAsyncContextManager[Turn | None]:
    """The turn a door's request waits for (its key's tenant's), or none: a stream, or a request
    with no credential (health, metrics, discovery, the card: cheap, and never behind a tenant)."""
    bucket = None if stream else caller_key(authorization)
    if bucket is None:
        return contextlib.nullcontext()
    return fair_turns().turn(turn_key(bucket))


def reset() -> None:
    """Forget every loop's turns (a settings change in tests; the next request makes them anew)."""
    _turns.clear()
