"""A short run is one transaction (DESIGN.md §The hot path), pinned: the statements, savepoints
and commits of an instant run, creation to terminal, through the services the doors call (MCP
tools/call: `run_create(inline=True)`; a blocking A2A SendMessage: `message_start(inline=True)`).

Counted on a real connection outside any test transaction: a COMMIT is the connection's commit,
and a write run outside an atomic block commits on its own (autocommit), so both count; the reads
before the transaction (the workflow, the messageId de-dup) run in autocommit and commit nothing.

Before issue 18 an instant no-op run cost 21 statements in 5 commits through `run_create` +
`run_advance_inline` (creation, a lease claim, then a plan and an apply transaction per node under
the row lock, and the completion), and 26 statements in 7 commits with 2 savepoints through
`message_start` (the idempotency claim and the Message record committed on their own). Now 4 and
6 statements, one commit each; a regression that brings any of that back fails here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from a2a.types import Message, Part, Role
from django.db import connection

from apps.a2a.models import TaskMessage
from apps.a2a.services import message_start
from apps.core.invalidation import CHANNEL, cache_listening, last_notification, wait_for
from apps.runs.models import Run, RunStatus
from apps.runs.services import interrupt_resolve, run_create
from apps.tenants.budgets import tenant_budget
from apps.tenants.selectors import subject_tenant_pk
from tests.runs.conftest import Caller, assert_log_contiguous, event_types

pytestmark = pytest.mark.django_db(transaction=True)

# run_create(inline=True), MCP: the workflow read, INSERT run, INSERT events (one bulk statement),
# the push-target probe, then COMMIT. Without the tally trigger's work, which PostgreSQL does
# inside the INSERT.
RUN_CREATE_STATEMENTS = 4
# message_start(inline=True), A2A: the messageId de-dup read, then the above plus the Message
# record's INSERT, all in the one commit.
MESSAGE_START_STATEMENTS = 6


@dataclass
class Counted:
    statements: list[str] = field(default_factory=list)
    savepoints: int = 0
    commits: int = 0  # explicit COMMITs, and writes that ran in autocommit (a commit each)
    autocommit_reads: int = 0  # reads outside any transaction block (nothing to commit)
    autocommit_writes: list[str] = field(default_factory=list)


@contextmanager
def counted() -> Iterator[Counted]:
    seen = Counted()

    def execute(run: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")):
            seen.savepoints += 1
        elif sql.startswith("BEGIN"):
            pass  # a driver that opens its transaction with a statement (PostgreSQL's does it unseen)
        else:
            seen.statements.append(sql)
            if not connection.in_atomic_block:
                if sql.lstrip().upper().startswith("SELECT"):
                    seen.autocommit_reads += 1
                else:
                    seen.commits += 1
                    seen.autocommit_writes.append(sql)
        return run(sql, params, many, context)

    commit = connection._commit

    def counting_commit() -> None:
        seen.commits += 1
        commit()

    connection.ensure_connection()
    connection._commit = counting_commit  # type: ignore[method-assign]
    try:
        with connection.execute_wrapper(execute):
            yield seen
    finally:
        del connection._commit


def _warm(caller: Caller) -> None:
    """First use seeds and caches (the tenant pk on the Subject, the workflow's schema validator,
    the tenant's budgets: a per-process cache that stores only once its listener is up)."""
    tenant_budget(subject_tenant_pk(caller.subject))  # starts this process's invalidation listener
    assert wait_for(cache_listening, timeout=30), "the invalidation listener never connected"
    # Notifications arrive in commit order: once this one is back, the previous test's flush (its
    # TRUNCATEs notify) can no longer empty what the warm-up below caches.
    barrier = f"barrier-{uuid.uuid4()}"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, barrier])
    assert wait_for(lambda: last_notification() == barrier, timeout=30), "the barrier notification never came"
    run_create(subject=caller.subject, workflow_id="echo", inputs={}, transport="mcp", inline=True)


@pytest.mark.parametrize("workflow_id", ["conformance-noop", "echo"])
def test_an_instant_run_is_one_commit(acme: Caller, sent_advances: list[Any], workflow_id: str) -> None:
    _warm(acme)
    with counted() as seen:
        run = run_create(
            subject=acme.subject, workflow_id=workflow_id, inputs={"text": "hi"}, transport="mcp", inline=True
        )
    assert run.status == RunStatus.COMPLETED
    assert seen.commits == 1, seen.autocommit_writes
    assert seen.savepoints == 0, seen.statements
    assert len(seen.statements) <= RUN_CREATE_STATEMENTS, "\n".join(seen.statements)
    assert event_types(run.run_id) == ["run.started", "node.started", "node.completed", "run.completed"]
    assert_log_contiguous(run.run_id)
    assert sent_advances == []  # no Celery round trip


def _message(message_id: str) -> Message:
    message = Message(role=Role.ROLE_USER, message_id=message_id)
    message.parts.append(Part(text="hi"))
    return message


@pytest.mark.parametrize("workflow_id", ["conformance-noop", "echo"])
def test_a_blocking_send_message_of_an_instant_run_is_one_commit(
    acme: Caller, sent_advances: list[Any], workflow_id: str
) -> None:
    _warm(acme)

    def start(message_id: str) -> Run:
        return message_start(
            subject=acme.subject,
            message=_message(message_id),
            workflow_id=workflow_id,
            inputs={"text": "hi"},
            context_id="ctx-1",
            inline=True,
        )

    with counted() as seen:
        run = start("m-1")
    assert run.status == RunStatus.COMPLETED
    assert seen.commits == 1, seen.autocommit_writes
    assert seen.savepoints == 0, seen.statements
    assert len(seen.statements) <= MESSAGE_START_STATEMENTS, "\n".join(seen.statements)
    assert TaskMessage.unscoped_all_tenants.filter(run=run, message_id="m-1").count() == 1
    # The same messageId again: its first task, nothing written.
    with counted() as again:
        assert start("m-1").pk == run.pk
    assert again.commits == 0 and len(again.statements) == 1, again.statements  # the de-dup read
    assert Run.unscoped_all_tenants.filter(tenant_id=run.tenant_id).count() == 2  # warm-up + this one


# interrupt_resolve(inline=True): the run (locked), its interrupt, the flip, the resumed node's
# node.started time, the row's UPDATE, the events' INSERT, the push-target probe, then COMMIT.
RESUME_STATEMENTS = 7


def test_a_resumed_instant_tail_is_one_commit(acme: Caller, sent_advances: list[Any]) -> None:
    _warm(acme)
    run = run_create(subject=acme.subject, workflow_id="conformance-approval", inputs={}, transport="mcp", inline=True)
    assert run.status == RunStatus.WAITING_APPROVAL
    with counted() as seen:
        resumed = interrupt_resolve(
            subject=acme.subject, run_id=run.run_id, node_id="approve", resume_value={"action": "accept"}, inline=True
        )
    assert resumed.status == RunStatus.COMPLETED
    assert seen.commits == 1, seen.autocommit_writes
    assert seen.savepoints == 0, seen.statements
    assert len(seen.statements) <= RESUME_STATEMENTS, "\n".join(seen.statements)
    assert event_types(run.run_id)[-3:] == ["interrupt.resolved", "node.completed", "run.completed"]
    assert_log_contiguous(run.run_id)
    assert sent_advances == []


# run_create(inline=True) of a run whose first node is a worker's (a delay): the workflow read,
# INSERT run, INSERT events, the push-target probe, then COMMIT; `runs.advance` on commit.
HANDOFF_STATEMENTS = 4


def test_a_handoff_to_the_worker_is_one_commit(acme: Caller, sent_advances: list[Any]) -> None:
    _warm(acme)
    with counted() as seen:
        run = run_create(
            subject=acme.subject, workflow_id="conformance-delay", inputs={"delayMs": 5000}, transport="mcp",
            inline=True,
        )  # fmt: skip
    assert run.status == RunStatus.PENDING
    assert seen.commits == 1, seen.autocommit_writes
    assert seen.savepoints == 0, seen.statements
    assert len(seen.statements) <= HANDOFF_STATEMENTS, "\n".join(seen.statements)
    assert sent_advances == [([run.run_id], run.queue)]
