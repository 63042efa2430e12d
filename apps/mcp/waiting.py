"""Reading a run as MCP answers from it, and waiting, in an async view, for it to reach a state
worth answering with.

The database is the source of truth: each check is one statement on the event loop's pool (the
run's snapshot, apps/runs/reads.py: no thread, no transaction held across an await); the run's
wake-up group only shortens the wait, so a wake-up lost between processes (the in-memory channel
layer) costs at most `DB_RECHECK_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from apps.core.sse import wake_waiter
from apps.runs.log import run_wake_group
from apps.runs.reads import RunSnapshot, snapshot_read
from apps.tenants.selectors import asubject_tenant_pk
from apps.tenants.subject import Subject

DB_RECHECK_SECONDS = 0.25


async def cancelled(step: asyncio.Future[Any]) -> None:
    """Cancel a step and let it finish cancelling (a request's step cancels its run with it)."""
    step.cancel()
    with contextlib.suppress(BaseException):
        await step


async def run_read(subject: Subject, run_id: str) -> RunSnapshot:
    """The subject's run with its open interrupts, artifacts and definition (what a CallToolResult,
    an input request or a Task is made of), or NotFound whatever the reason."""
    return await snapshot_read(tenant_pk=await asubject_tenant_pk(subject), run_id=run_id, definition=True)


async def run_wait(*, subject: Subject, run_id: str, settled: Callable[[RunSnapshot], bool]) -> RunSnapshot:
    """The run's snapshot as soon as `settled` holds for it."""
    async with wake_waiter(run_wake_group(run_id)) as wait:
        while True:
            snapshot = await run_read(subject, run_id)
            if settled(snapshot):
                return snapshot
            await wait(DB_RECHECK_SECONDS)
