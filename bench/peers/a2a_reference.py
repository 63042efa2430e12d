"""The peer for the A2A scenarios: the `a2a-sdk` 1.3.0 reference server, as its docs assemble it.

Runs in the bench's own peer venv (bench/harness/peer_env.py), never in the project's. A Starlette
app with `create_jsonrpc_routes` + the card route, `DefaultRequestHandler` (v2) and either the
SDK's `DatabaseTaskStore` on PostgreSQL (asyncpg, same server as our host) or `InMemoryTaskStore`.
The executor is the trivial one the issue names: it completes every task at once.

Before serving it saves one completed task (id from BENCH_TASK_ID) owned by the unauthenticated
user every request resolves to, so GetTask has something to get; with BENCH_LIST_TASKS=N also
N - 1 more of that user's, so ListTasks pages a listing of exactly N, as ours does (the bench
creates the peer's database anew for each run and checks both totals before it measures).

    BENCH_A2A_STORE=postgres|memory BENCH_PG_DSN=postgresql+asyncpg://... BENCH_TASK_ID=... [BENCH_LIST_TASKS=N]
    uvicorn --factory bench.peers.a2a_reference:app_factory   (run from the repo root)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from a2a.helpers import new_task, new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from starlette.applications import Starlette

PORT = int(os.environ.get("BENCH_PEER_PORT", "9101"))


class CompleteAtOnce(AgentExecutor):
    """The no-op agent: a task that is created and completed in the same call."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            assert context.message is not None
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def _card() -> AgentCard:
    return AgentCard(
        name="bench reference",
        description="a2a-sdk reference server for openwop-host benchmarks",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{PORT}/a2a/jsonrpc", protocol_binding="JSONRPC", protocol_version="1.0"
            )
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="noop", name="noop", description="completes at once", tags=["bench"])],
    )


def _store() -> Any:
    if os.environ.get("BENCH_A2A_STORE", "postgres") == "memory":
        return InMemoryTaskStore()
    from a2a.server.tasks import DatabaseTaskStore
    from sqlalchemy.ext.asyncio import create_async_engine

    # SQLAlchemy's default pool (5 + 10 overflow) per process: the SDK's documented setup.
    return DatabaseTaskStore(create_async_engine(os.environ["BENCH_PG_DSN"]))


async def _list_tasks_seed(store: Any, size: int) -> None:
    """The ListTasks page scenario's listing: with the GetTask task, `size` completed tasks of the
    same (unauthenticated) owner (several worker processes: the last one saved is the marker)."""
    if size <= 1 or await store.get(f"bench-list-{size - 2}", ServerCallContext()) is not None:
        return
    for n in range(size - 1):
        with contextlib.suppress(Exception):  # saved by another worker process meanwhile
            task = new_task(f"bench-list-{n}", "bench-list", TaskState.TASK_STATE_COMPLETED)
            await store.save(task, ServerCallContext())


def app_factory() -> Starlette:
    store = _store()
    handler = DefaultRequestHandler(agent_executor=CompleteAtOnce(), task_store=store, agent_card=_card())

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        task = new_task(os.environ["BENCH_TASK_ID"], "bench-context", TaskState.TASK_STATE_COMPLETED)
        try:
            await store.save(task, ServerCallContext())  # the unauthenticated user every request is
        except Exception as exc:  # another worker process saved it first (the store's unique key)
            if type(exc).__name__ != "IntegrityError":
                raise
        await _list_tasks_seed(store, int(os.environ.get("BENCH_LIST_TASKS", "0")))
        yield

    routes = [*create_agent_card_routes(_card()), *create_jsonrpc_routes(handler, "/a2a/jsonrpc")]
    return Starlette(routes=routes, lifespan=lifespan)
