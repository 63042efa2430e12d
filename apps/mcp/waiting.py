"""Waiting, in an async view, for a run to reach a state worth answering with.

The database is the source of truth: each check is one short `sync_to_async` read (no transaction
or connection held across an await); the run's wake-up group only shortens the wait, so a wake-up
lost between processes (the in-memory channel layer) costs at most `DB_RECHECK_SECONDS`.
"""

from __future__ import annotations

from collections.abc import Callable

from asgiref.sync import sync_to_async

from apps.core.sse import wake_waiter
from apps.runs.log import run_wake_group
from apps.runs.models import Interrupt, Run
from apps.runs.selectors import run_get_readable, run_open_interrupt
from apps.tenants.subject import Subject

DB_RECHECK_SECONDS = 0.25


def _read(subject: Subject, run_id: str) -> tuple[Run, Interrupt | None]:
    run = run_get_readable(subject=subject, run_id=run_id)
    return run, run_open_interrupt(run=run)


async def run_wait(
    *, subject: Subject, run_id: str, settled: Callable[[Run, Interrupt | None], bool]
) -> tuple[Run, Interrupt | None]:
    """Return the run and its open interrupt as soon as `settled` holds for them."""
    async with wake_waiter(run_wake_group(run_id)) as wait:
        while True:
            run, interrupt = await sync_to_async(_read)(subject, run_id)
            if settled(run, interrupt):
                return run, interrupt
            await wait(DB_RECHECK_SECONDS)
