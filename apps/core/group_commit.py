"""Group commit from the event loop: concurrent writes share one statement and one commit, and each
caller awaits the outcome of its own row (DESIGN.md §The hot path).

One writer per event loop and kind of row (its pool connections are bound to that loop). How a
batch goes:

- A caller queues its item (already validated and serialised: a bad item fails its own request)
  and awaits a future. The first arrival starts the flusher; whatever arrives while a batch is
  being written waits for the next one. No timer: under load a batch is whatever queued during the
  previous commit, and a lone request is written at once (group commit as databases do it for
  their own log); a 0.5 or 2 ms wait made batches no bigger at c=64 and cost a lone request 2-3 ms.
- The flusher writes batches one after another on one pooled connection while there is work; the
  subclass's `write` turns a batch into statements and says what became of each item.
- A caller that goes away (a client disconnect cancels its task) does not take its row with it:
  the item was queued, and the batch is written regardless.
- A batch whose write raises fails every waiter it has not settled with that exception; a flush
  slower than SLOW_FLUSH_SECONDS is logged with its size and what queued behind it (every caller
  waits on its flush, so this is where a stall would show).
- A flush still waiting after OPENWOP_FLUSH_WAIT_LOG_SECONDS is logged while it waits, and again
  at each multiple: what its backend waits on (the lock, and the pid, application name and state
  of each backend holding it up: apps/core/lock_waits.py), read from a connection of its own,
  since the pool may be what is exhausted. A stall says its cause while it lasts, not after.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.conf import settings
from psycopg import AsyncConnection

from apps.core.async_db import conninfo, pooled_connection
from apps.core.lock_waits import LOCK_WAITS_SQL, describe_waits, lock_waits_from_rows

logger = logging.getLogger(__name__)

T = TypeVar("T")  # what a caller queues
R = TypeVar("R")  # what its caller gets back once the batch is written
W = TypeVar("W", bound="GroupCommit[Any, Any]")

MAX_BATCH = 256  # items per batch: bounds the statement and a batch's share of the lock time
SLOW_FLUSH_SECONDS = 0.05


@dataclass(slots=True)
class GroupCommitStats:
    """What one writer has done on its loop: how much batching the load produced."""

    flushes: int = 0  # batches taken from the queue
    commits: int = 0  # statements that committed rows (each is its own transaction)
    records: int = 0  # rows committed
    failures: int = 0  # batches whose waiters got an exception
    largest_commit: int = 0  # most rows in one commit
    slow_flushes: int = 0  # batches that took longer than SLOW_FLUSH_SECONDS (each logged)

    def committed(self, rows: int) -> None:
        if rows:
            self.commits += 1
            self.records += rows
            self.largest_commit = max(self.largest_commit, rows)


class GroupCommit(Generic[T, R]):
    """The group-commit writer of one event loop for one kind of row: subclasses define `write`
    (and name themselves in `what`, for the slow-flush line). Get one with `writer_of`."""

    what = "group commit"

    def __init__(self, *, max_batch: int = MAX_BATCH) -> None:
        self.max_batch = max_batch
        self.stats = GroupCommitStats()
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def write(self, conn: AsyncConnection[Any], items: list[T]) -> list[R | BaseException]:
        """Write `items`; what became of each, in order (a result, or the exception its caller gets)."""
        raise NotImplementedError

    async def submit(self, item: T) -> R:
        """Queue `item` and return its result once its batch is written. Nothing here awaits
        before the item is queued: once this coroutine runs, a cancellation cannot unqueue it."""
        done: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, done))
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._drain(), name=self.what)
        # If the caller is cancelled here, this future is cancelled with it; the row is still
        # written (the flusher owns the queue), and settling skips a done future.
        return await done

    async def drain(self) -> None:
        """Wait until everything queued so far is written or failed (a server's shutdown, a test)."""
        while self._flusher is not None:
            await asyncio.shield(self._flusher)

    def _take(self) -> list[tuple[T, asyncio.Future[R]]]:
        batch = self._queue[: self.max_batch]
        del self._queue[: self.max_batch]
        return batch

    async def _drain(self) -> None:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._queue:
                batch = self._take()
                try:
                    async with pooled_connection() as conn:
                        while True:
                            await self._flush(conn, batch)
                            if not self._queue or conn.broken:
                                break  # a broken connection goes back to the pool, which drops it
                            batch = self._take()
                except Exception as exc:  # no connection (pool timeout, database down)
                    _fail(batch, exc)
        except BaseException:  # cancelled (the loop is shutting down): nobody is left to write these
            for _, done in batch + self._queue:
                done.cancel()
            self._queue.clear()
            raise
        finally:
            self._flusher = None

    async def _flush(self, conn: AsyncConnection[Any], batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        """Write one batch and settle its waiters; never raises (a failure goes to the waiters)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        self.stats.flushes += 1
        watcher = loop.create_task(self._watch(conn, len(batch), started), name=f"{self.what} watcher")
        try:
            outcomes = await self.write(conn, [item for item, _ in batch])
            for (_, done), outcome in zip(batch, outcomes, strict=True):
                if done.done():  # a cancelled caller's future
                    continue
                if isinstance(outcome, BaseException):
                    done.set_exception(outcome)
                else:
                    done.set_result(outcome)
        except Exception as exc:
            self.stats.failures += 1
            _fail(batch, exc)
        finally:
            watcher.cancel()
            took = loop.time() - started
            if took > SLOW_FLUSH_SECONDS:
                self.stats.slow_flushes += 1
                logger.warning(
                    "%s: a flush of %d items took %.0f ms (%d queued behind it)",
                    self.what, len(batch), took * 1000, len(self._queue),
                )  # fmt: skip

    async def _watch(self, conn: AsyncConnection[Any], size: int, started: float) -> None:
        """While the flush lasts: at each OPENWOP_FLUSH_WAIT_LOG_SECONDS, log what it waits on."""
        every = float(settings.OPENWOP_FLUSH_WAIT_LOG_SECONDS)
        if every <= 0:
            return
        pid = conn.info.backend_pid
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(every)
            try:
                async with await AsyncConnection.connect(
                    conninfo(), autocommit=True, connect_timeout=5, application_name="openwop-flush-watch"
                ) as side:
                    waits = lock_waits_from_rows(await (await side.execute(LOCK_WAITS_SQL, [pid])).fetchall())
                seen = describe_waits(waits)
            except Exception as exc:  # the look is best effort: say that it failed, and how (class only)
                seen = f"(could not look: {type(exc).__name__})"
            logger.warning(
                "%s: a flush of %d items has waited %.1f s (%d queued behind it); its backend waits on %s",
                self.what, size, loop.time() - started, len(self._queue), seen,
            )  # fmt: skip


def _fail(batch: list[tuple[Any, asyncio.Future[Any]]], exc: BaseException) -> None:
    for _, done in batch:
        if not done.done():
            done.set_exception(exc)


_writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[type[Any], Any]] = weakref.WeakKeyDictionary()


def writer_of(kind: type[W]) -> W:
    """The running loop's writer of `kind` (its pool connections are bound to that loop)."""
    writers = _writers.setdefault(asyncio.get_running_loop(), {})
    writer = writers.get(kind)
    if writer is None:
        writer = writers[kind] = kind()
    return writer
