"""A `tools/call`'s run, told on the request's own stream: `notifications/message` and
`notifications/progress` (2026-07-28 basic/utilities; interop map row `io.modelcontextprotocol/logLevel`).

Opt-in per request, never inferred (2026-07-28 is stateless): log messages flow only when the
request's `_meta` carries `io.modelcontextprotocol/logLevel`, and only for events at or above that
level; progress only when it carries `progressToken`. A request with neither gets exactly the
answer it got before, and nothing here runs for it.

The run's log is the source (apps/runs: RunEvent, appended by whichever process advances it), so a
run a worker advances is told as its events commit, and one settled in the request is told from
its committed log before the response. What a message says is content-free: the run and node ids,
the node's kind and what happened to it (and a `log` node's own fixed message, from the workflow's
definition). Never inputs, outputs, artifact parts, interrupt data or credentials: a log reader is
not a result reader.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from mcp_types import LOG_LEVEL_META_KEY

from apps.core.sse import wake_waiter
from apps.mcp.waiting import DB_RECHECK_SECONDS, cancelled
from apps.runs.log import run_wake_group
from apps.runs.models import TERMINAL_EVENT_TYPES, Run, RunEvent
from apps.runs.nodes import LOG_LEVELS
from apps.runs.reads import events_after_sync
from apps.runs.selectors import run_get_readable
from apps.tenants.subject import Subject

PROGRESS_TOKEN_META_KEY = "progressToken"  # noqa: S105 (a meta key, not a secret)
LOGGER_NAME = "openwop.run"

_LEVEL_RANK = {level: rank for rank, level in enumerate(LOG_LEVELS)}

# The node events a log reader is told of: (their level, what happened). The `log` node kind's
# completion takes the level it was configured with instead.
_TOLD_EVENTS = {
    "node.started": ("debug", "started"),
    "node.completed": ("debug", "completed"),
    "artifact.created": ("info", "artifact-created"),
    "node.suspended": ("notice", "suspended"),
    "node.cancelled": ("warning", "cancelled"),
    "node.failed": ("error", "failed"),
}


@dataclass(frozen=True, slots=True)
class NotificationAsk:
    """What the request's `_meta` asked to be told: the least severe level (its rank in
    LOG_LEVELS), and the progress token."""

    log_rank: int | None
    progress_token: str | int | None


def notification_ask(params: Any) -> NotificationAsk | None:
    """The request's ask, or None when it asked for neither (an unknown level asks nothing)."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return None
    level = meta.get(LOG_LEVEL_META_KEY)
    rank = _LEVEL_RANK.get(level) if isinstance(level, str) else None
    token = meta.get(PROGRESS_TOKEN_META_KEY)
    if isinstance(token, bool) or not isinstance(token, str | int):
        token = None
    if rank is None and token is None:
        return None
    return NotificationAsk(log_rank=rank, progress_token=token)


@dataclass(frozen=True, slots=True)
class RunFinish:
    """`tools/call`'s finishing step (tools.tool_call_begin), with the run it answers for, so a
    transport can tell that run's events on the request's stream while the step waits."""

    step: Callable[[], Awaitable[dict[str, Any]]]
    subject: Subject
    run_id: str
    committed: Run | None  # a new run, as its creation committed it
    continued: bool  # an MRTR retry: the run began in an earlier request

    async def __call__(self) -> dict[str, Any]:
        return await self.step()


class RunNotifier:
    """Turns a run's events, fed in order, into the notifications one request asked for."""

    def __init__(self, *, ask: NotificationAsk, run: Run) -> None:
        self.ask = ask
        self.run = run
        nodes = (run.definition or {}).get("nodes", [])
        self.nodes: dict[str, dict[str, Any]] = {str(node.get("id")): node for node in nodes if isinstance(node, dict)}
        self.total = len(nodes)
        self.completed = 0  # node completions so far: the progress, monotonic by construction
        self.position = 0
        self.finished = False  # the run's terminal event was seen: nothing follows it

    def skip(self, events: list[RunEvent]) -> None:
        """Events before this request: counted toward progress, not told."""
        for event in events:
            self.completed += event.type == "node.completed"
            self.position = event.sequence

    def more(self) -> list[dict[str, Any]]:
        """`feed` with the run's events committed since the last one fed."""
        return self.feed(events_after_sync(tenant_pk=self.run.tenant_id, run_pk=self.run.pk, after=self.position))

    def feed(self, events: list[RunEvent]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        for event in events:
            self.position = event.sequence
            self.finished = self.finished or event.type in TERMINAL_EVENT_TYPES
            if event.type == "node.completed":
                self.completed += 1
                if self.ask.progress_token is not None:
                    messages.append(self._progress(event))
            if self.ask.log_rank is not None:
                message = self._message(event)
                if message is not None:
                    messages.append(message)
        return messages

    def _progress(self, event: RunEvent) -> dict[str, Any]:
        params: dict[str, Any] = {
            "progressToken": self.ask.progress_token,
            "progress": self.completed,
            "message": f"Node {event.node_id} completed.",
        }
        if self.total:
            params["total"] = self.total
        return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}

    def _message(self, event: RunEvent) -> dict[str, Any] | None:
        if event.type not in _TOLD_EVENTS or not event.node_id:
            return None
        level, status = _TOLD_EVENTS[event.type]
        node = self.nodes.get(event.node_id, {})
        kind = node.get("kind", "")
        data: dict[str, Any] = {
            "runId": self.run.run_id,
            "nodeId": event.node_id,
            "kind": kind,
            "status": status,
        }
        config = node.get("config")
        if kind == "log" and event.type == "node.completed" and isinstance(config, dict):
            # The author's fixed text (never rendered from inputs: apps/runs/nodes.py LogNode).
            level = config.get("level", "info")
            data["message"] = config.get("message", "")
        assert self.ask.log_rank is not None
        if _LEVEL_RANK.get(level, 0) < self.ask.log_rank:
            return None
        return {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": level, "logger": LOGGER_NAME, "data": data},
        }


def _open(finish: RunFinish, ask: NotificationAsk) -> tuple[RunNotifier, list[dict[str, Any]]]:
    """The notifier and what the run's log already tells. A new run is told from its start; an
    MRTR retry from the resolution it made (the newest `interrupt.resolved`), or from now."""
    run = finish.committed or run_get_readable(subject=finish.subject, run_id=finish.run_id)
    notifier = RunNotifier(ask=ask, run=run)
    events = events_after_sync(tenant_pk=run.tenant_id, run_pk=run.pk, after=0)
    start = 0
    if finish.continued:
        resolved = [e.sequence for e in events if e.type == "interrupt.resolved"]
        start = resolved[-1] - 1 if resolved else (events[-1].sequence if events else 0)
    notifier.skip([e for e in events if e.sequence <= start])
    return notifier, notifier.feed([e for e in events if e.sequence > start])


async def run_notifications(
    *, finish: RunFinish, ask: NotificationAsk, answered: asyncio.Future[Any]
) -> AsyncIterator[dict[str, Any]]:
    """The notifications for the run's events, in event order, as they commit, until `answered`
    (the finishing step) is done and every event committed before its answer has been told."""
    async with wake_waiter(run_wake_group(finish.run_id)) as wait:
        notifier, messages = await sync_to_async(_open)(finish, ask)
        while True:
            for message in messages:
                yield message
            if notifier.finished:
                return
            done = answered.done()  # before the read: the read then sees what the answer saw
            messages = await sync_to_async(notifier.more)()
            if done:
                for message in messages:
                    yield message
                return
            waiting = asyncio.ensure_future(wait(DB_RECHECK_SECONDS))
            try:
                await asyncio.wait({answered, waiting}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not waiting.done():
                    await cancelled(waiting)
