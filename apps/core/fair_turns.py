"""Fair turns: a process's requests admitted in turns across tenants, so one tenant's backlog of
requests is not another's queue (issue 49, "one tenant's load never becomes another's").

Without turns, an event-loop process serves whatever arrives, in arrival order: a tenant that
keeps many connections busy with heavy requests (a 100k-run filtered ListTasks) has most of the
process, and a tenant doing light GetTasks beside it queues behind every one of them. With turns,
at most OPENWOP_FAIR_SLOTS requests (A2A on every binding, MCP, REST) are served at once in a
process; past that a request waits for a turn, and a freed turn goes to the waiting tenant that
has used the least of this process recently: the seconds its requests held a turn, halved every
HALF_LIFE_SECONDS. A tenant's own requests go first come, first served; a tenant alone uses every
turn. Turns decide who starts; the requests holding turns still share the one event loop (what
that leaves of a light tenant's latency beside a heavy one: bench/README.md §Fairness).

A turn covers the work, not a wait: a request that holds one longer than OPENWOP_FAIR_HOLD_SECONDS
(a blocking SendMessage, a tools/call waiting for its run) gives it up and goes on without one, so
slow waits never hold the process from others; its time up to then is still counted. Streams take
no turn (their slots are budgeted: apps.core.request_limits).

The tenant is the one the per-process bucket cache knows for the key (apps.core.rate_limits
`bucket_tenant`), else the key's bucket itself (a key's first request). A request with no
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
# The usage table is pruned of tenants whose decayed usage is below this (seconds) when it has
# more than PRUNE_AT entries (every distinct key's bucket before its tenant is learned has one).
PRUNE_BELOW = 1e-4
PRUNE_AT = 1024


def slots() -> int:
    """Requests served at once per process (0: no turns, every request served as it arrives)."""
    return int(getattr(settings, "OPENWOP_FAIR_SLOTS", 8))


def hold_seconds() -> float:
    return float(getattr(settings, "OPENWOP_FAIR_HOLD_SECONDS", 0.5))


@dataclass(eq=False)
class _Holder:
    tenant: str
    started: float
    released: bool = False
    timer: asyncio.TimerHandle | None = None


@dataclass
class _Usage:
    seconds: float = 0.0
    at: float = 0.0

    def now(self, now: float) -> float:
        return self.seconds * 0.5 ** ((now - self.at) / HALF_LIFE_SECONDS)


@dataclass
class FairTurns:
    """The turns of one event loop."""

    slots: int
    hold: float
    busy: int = 0
    waiting: dict[str, deque[asyncio.Future[None]]] = field(default_factory=dict)
    usage: dict[str, _Usage] = field(default_factory=dict)

    @contextlib.asynccontextmanager
    async def turn(self, tenant: str) -> AsyncIterator[None]:
        if self.slots <= 0:
            yield
            return
        if self.busy < self.slots and not self.waiting:
            self.busy += 1
        else:
            await self._wait(tenant)  # the turn was handed over: `busy` already counts it
        holder = _Holder(tenant, time.monotonic())
        if self.hold > 0:
            holder.timer = asyncio.get_running_loop().call_later(self.hold, self._give_up, holder)
        try:
            yield
        finally:
            if holder.timer is not None:
                holder.timer.cancel()
            self._give_up(holder)

    async def _wait(self, tenant: str) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self.waiting.setdefault(tenant, deque())
        queue.append(future)
        metrics.FAIR_TURNS_WAITING.inc()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._hand_on()  # handed a turn just as it was cancelled: the next one has it
            else:
                with contextlib.suppress(ValueError):
                    queue.remove(future)
                if not queue and self.waiting.get(tenant) is queue:
                    del self.waiting[tenant]
            raise
        finally:
            metrics.FAIR_TURNS_WAITING.dec()

    def _give_up(self, holder: _Holder) -> None:
        """The holder's turn ends (its request ended, or it held the turn past `hold`)."""
        if holder.released:
            return
        holder.released = True
        now = time.monotonic()
        self._charge(holder.tenant, now - holder.started, now)
        self._hand_on()

    def _charge(self, tenant: str, seconds: float, now: float) -> None:
        used = self.usage.get(tenant)
        if used is None:
            if len(self.usage) >= PRUNE_AT:
                self.usage = {name: u for name, u in self.usage.items() if u.now(now) >= PRUNE_BELOW}
            used = self.usage[tenant] = _Usage()
        used.seconds, used.at = used.now(now) + seconds, now

    def _used(self, tenant: str, now: float) -> float:
        used = self.usage.get(tenant)
        return 0.0 if used is None else used.now(now)

    def _hand_on(self) -> None:
        """A turn is free: to the least-served waiting tenant's oldest request, else back to the pool."""
        now = time.monotonic()
        while self.waiting:
            tenant = min(self.waiting, key=lambda name: self._used(name, now))
            queue = self.waiting[tenant]
            future = queue.popleft()
            if not queue:
                del self.waiting[tenant]
            if not future.done():
                future.set_result(None)
                return
        self.busy -= 1


def turn_key(bucket: str) -> str:
    """Whose turn a request takes: its key's tenant when this process knows it, else its key."""
    tenant = bucket_tenant(bucket)
    return f"tenant:{tenant.pk}" if tenant is not None else f"key:{bucket}"


_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FairTurns] = weakref.WeakKeyDictionary()


def fair_turns() -> FairTurns:
    """This event loop's turns (made on first use with the settings then in force)."""
    loop = asyncio.get_running_loop()
    turns = _turns.get(loop)
    if turns is None:
        turns = _turns[loop] = FairTurns(slots=slots(), hold=hold_seconds())
    return turns


def turn_for(authorization: str | None, *, stream: bool) -> contextlib.AbstractAsyncContextManager[None]:
    """The turn a door's request waits for (its key's tenant's), or none: a stream, or a request
    with no credential (health, metrics, discovery, the card: cheap, and never behind a tenant)."""
    bucket = None if stream else caller_key(authorization)
    if bucket is None:
        return contextlib.nullcontext()
    return fair_turns().turn(turn_key(bucket))


def reset() -> None:
    """Forget every loop's turns (a settings change in tests; the next request makes them anew)."""
    _turns.clear()
