"""messageId de-duplication under a race (map row SendMessage: "messageId is the idempotency
seed"): the Message record commits in the run's one transaction, so of two copies of one message
sent at once the second waits for the first's commit, rolls back whole, and answers with the
first's task. One run, one record, whichever copy wins."""

from __future__ import annotations

import threading

import pytest
from a2a.types import Message, Part, Role
from django.db import connection

from apps.a2a.models import TaskMessage
from apps.a2a.services import message_start
from apps.runs.models import Run
from tests.a2a.conftest import Caller

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("inline", [True, False])
def test_two_copies_of_one_message_start_one_run(acme: Caller, inline: bool) -> None:
    message = Message(role=Role.ROLE_USER, message_id=f"race-{inline}")
    message.parts.append(Part(text="hi"))
    barrier = threading.Barrier(2)
    answers: list[int] = []
    errors: list[BaseException] = []

    def send() -> None:
        try:
            barrier.wait(timeout=30)
            run = message_start(
                subject=acme.subject,
                message=message,
                workflow_id="conformance-noop",
                inputs={},
                context_id="ctx-race",
                inline=inline,
            )
            answers.append(run.pk)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(answers) == 2 and answers[0] == answers[1]
    assert Run.unscoped_all_tenants.filter(context_id="ctx-race").count() == 1
    assert TaskMessage.unscoped_all_tenants.filter(message_id=message.message_id).count() == 1
