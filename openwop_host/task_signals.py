"""What every Celery task does around its body, driven by Celery's task signals (issue 51 item 3).

- `task_prerun` opens a log scope naming the task (`job=<task name>`, apps/core/logformat.py) and
  `task_postrun` ends it: the lines a task writes say which job wrote them, and what the task
  binds on the way (a run's tenant and id, a delivery's) ends with it, never reaching the thread's
  next task.
- `task_success` / `task_failure` of a beat job (a task settings.CELERY_BEAT_SCHEDULE sends)
  record its last success or failure (apps/core/jobs.py): /metrics'
  `openwop_beat_job_last_success_timestamp_seconds{job}`. A task that recorded its own outcome
  is left as it wrote it: a pass with its counts, or a refused retention pass (a failure, though
  the task returns).

Registered by importing this module from openwop_host/celery.py; Django's apps load lazily (the
Celery app is imported before they are ready).
"""

from __future__ import annotations

from contextvars import Token
from typing import Any

from celery.signals import task_failure, task_postrun, task_prerun, task_success

# What each running task set, by task id (a thread pool runs several tasks at once, each in its
# own thread; prerun and postrun of one task run in its thread): its log scope, and the set of
# job outcomes it recorded itself (apps/core/jobs.py).
_begun: dict[str, tuple[Token[dict[str, str] | None], Token[set[str] | None]]] = {}


@task_prerun.connect
def _task_begun(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    from apps.core.jobs import task_outcomes_begin
    from apps.core.logformat import log_scope

    if task_id is not None:
        _begun[task_id] = (log_scope(job=getattr(task, "name", None)), task_outcomes_begin())


@task_postrun.connect
def _task_ended(task_id: str | None = None, **_: Any) -> None:
    from apps.core.jobs import task_outcomes_end
    from apps.core.logformat import log_scope_end

    tokens = _begun.pop(task_id, None) if task_id is not None else None
    if tokens is not None:
        try:
            task_outcomes_end(tokens[1])
            log_scope_end(tokens[0])
        except ValueError:  # ended in another context than it began (never under a worker's pools)
            pass


def _beat_job(sender: Any) -> str | None:
    from apps.core.jobs import scheduled_jobs

    name = getattr(sender, "name", None)
    return name if isinstance(name, str) and name in scheduled_jobs() else None


@task_success.connect
def _job_succeeded(sender: Any = None, **_: Any) -> None:
    from apps.core.jobs import job_succeeded, recorded_here

    name = _beat_job(sender)
    # A task that recorded its own outcome (its pass's counts, a refusal) is not written again.
    if name is not None and not recorded_here(name):
        job_succeeded(name)


@task_failure.connect
def _job_failed(sender: Any = None, **_: Any) -> None:
    name = _beat_job(sender)
    if name is not None:
        from apps.core.jobs import job_failed

        job_failed(name)
