"""Black-box: CancelTask on a task a live worker is running answers it CANCELED, on all three
bindings (issue 32 item 1), and past its bound answers what is true (apps/a2a/operations.py
cancel_task). The a2a-sdk clients against a live uvicorn, grpc_serve and Celery worker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import pytest
from a2a.client import Client
from a2a.types import AgentCard, CancelTaskRequest, GetTaskRequest, Task, TaskState
from a2a.utils.errors import TaskNotFoundError
from django.test import override_settings
from django.utils import timezone

from apps.a2a.card import public_card_current
from apps.runs.models import Run, RunEvent, RunStatus
from tests.a2a.live import Session, db_read, live_card, only_task, until_terminal, user_message
from tests.a2a.test_grpc import Clients
from tests.live import LiveProcess, start_grpc

BINDINGS = ["JSONRPC", "HTTP+JSON", "GRPC"]
LONG_WAIT_MS = 120_000  # far longer than any test: only a cancel ends the node


@pytest.fixture(scope="session")
def _live_grpc_for_cancel(_live_env) -> Iterator[str]:  # type: ignore[no-untyped-def]
    env, var_dir = _live_env
    live: LiveProcess
    live, address = start_grpc(env, var_dir)
    yield address
    live.stop()


@pytest.fixture
async def principals(
    request: pytest.FixtureRequest, live_url: str, keys: dict[str, str]
) -> AsyncIterator[dict[str, Client]]:
    """{tenant: a2a-sdk Client} on the binding the test is parametrized with (`keys`: the live
    host and worker running, conftest.py)."""
    binding: str = request.param
    closers = []
    clients: dict[str, Client] = {}
    if binding == "GRPC":
        address = request.getfixturevalue("_live_grpc_for_cancel")

        def build() -> AgentCard:
            with override_settings(OPENWOP_GRPC_ENABLED=True, OPENWOP_GRPC_URL=address):
                return public_card_current()[0]

        card = await db_read(build)
        for tenant, key in keys.items():
            grpc_clients = Clients(card, key)
            clients[tenant] = grpc_clients.client()
            closers.append(grpc_clients.close)
    else:
        card = await live_card(live_url)
        for tenant, key in keys.items():
            session = Session(card, binding, key)
            clients[tenant] = session.client()
            closers.append(session.close)
    yield clients
    for close in closers:
        await close()


async def _running_in_its_node(task_id: str) -> Run:
    """The run once a worker started its waiting node (what CancelTask must interrupt): parked
    on the clock, held by no thread, or, for a moment, by the worker that parks it."""
    for _ in range(600):
        run = await db_read(lambda: Run.unscoped_all_tenants.get(run_id=task_id))
        if run.status == RunStatus.RUNNING and run.current_node_id:
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"no worker started {task_id}")


async def _long_task(client: Client) -> Task:
    message = user_message(prefix="cancel", data={"waitMs": LONG_WAIT_MS}, skill="conformance-cancellable")
    task = await only_task(client, message, immediately=True)
    await _running_in_its_node(task.id)
    return task


@pytest.mark.parametrize("principals", BINDINGS, indirect=True)
async def test_cancel_of_a_running_task_answers_it_canceled(principals: dict[str, Client]) -> None:
    acme, globex = principals["acme"], principals["globex"]
    task = await _long_task(acme)

    # Another tenant's cancel is the unknown task's answer and touches nothing.
    with pytest.raises(TaskNotFoundError):
        await globex.cancel_task(CancelTaskRequest(id=task.id))
    assert (await acme.get_task(GetTaskRequest(id=task.id))).status.state == TaskState.TASK_STATE_WORKING

    cancelled = await acme.cancel_task(CancelTaskRequest(id=task.id))
    assert cancelled.id == task.id
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    # What it answered is committed: the log ends with the cancel, the task reads the same.
    run = await db_read(lambda: Run.unscoped_all_tenants.get(run_id=task.id))
    assert run.status == RunStatus.CANCELLED and run.lease_owner == ""
    last = await db_read(lambda: RunEvent.unscoped_all_tenants.filter(run=run).order_by("-sequence").first())
    assert last is not None and last.type == "run.cancelled"
    assert (await acme.get_task(GetTaskRequest(id=task.id))).status.state == TaskState.TASK_STATE_CANCELED


@pytest.mark.parametrize("principals", ["JSONRPC"], indirect=True)
async def test_past_its_bound_cancel_answers_the_task_as_it_is_and_the_cancel_still_commits(
    principals: dict[str, Client],
) -> None:
    """A worker that holds the run and never looks (frozen, or gone with its lease still live):
    CancelTask waits its bound, then answers WORKING, which is true: the cancel is recorded
    (`cancelling`) but not committed. Once the lease lapses a worker finishes it."""
    acme = principals["acme"]
    task = await _long_task(acme)
    # The lease passes to a worker that never checks (the real one loses it and writes nothing).
    ghost_until = timezone.now() + timedelta(minutes=10)
    await db_read(
        lambda: Run.unscoped_all_tenants.filter(run_id=task.id).update(
            lease_owner="frozen-worker", lease_expires_at=ghost_until
        )
    )

    answered = await acme.cancel_task(CancelTaskRequest(id=task.id))
    assert answered.status.state == TaskState.TASK_STATE_WORKING
    run = await db_read(lambda: Run.unscoped_all_tenants.get(run_id=task.id))
    assert run.status == RunStatus.CANCELLING and run.lease_owner == "frozen-worker"

    # The frozen worker's lease lapses: the sweeper hands the run to a live worker, which finishes the cancel.
    await db_read(
        lambda: Run.unscoped_all_tenants.filter(run_id=task.id).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )
    )
    assert (await until_terminal(acme, task.id)).status.state == TaskState.TASK_STATE_CANCELED
