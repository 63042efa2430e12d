"""A parallel node: one step opens several interrupts at once, the run waits until every one is
answered (one by one, or together), then the node completes with each branch's outputs. In-process
on the real database, through the REST door and the services, on the worker path and inline."""

from __future__ import annotations

from typing import Any

import pytest

from apps.agents.definitions import node_config_errors
from apps.agents.services import workflow_create
from apps.core.errors import Conflict, ValidationFailed
from apps.runs.models import Interrupt, Run, RunStatus
from apps.runs.services import interrupts_resolve, run_create
from apps.tenants.models import Tenant
from tests.runs.conftest import Caller, advance, assert_log_contiguous, event_types

pytestmark = pytest.mark.django_db

QUESTION = {"questions": [{"id": "name", "question": "Your name?"}],
            "resumeSchema": {"type": "object", "required": ["name"]}}  # fmt: skip
NODES: list[dict[str, Any]] = [
    {
        "id": "ask",
        "kind": "parallel",
        "config": {
            "branches": [
                {"id": "who", "kind": "input", "config": QUESTION},
                {"id": "ok", "kind": "approval", "config": {"title": "Go?"}},
            ]
        },
    },
    {"id": "done", "kind": "echo", "config": {"output": {"finished": True}}},
]


def _workflow(caller: Caller, nodes: list[dict[str, Any]] = NODES) -> str:
    workflow_create(
        tenant=Tenant.objects.get(slug=caller.tenant),
        workflow_id="both-at-once",
        definition={"nodes": nodes},
        input_schema={"type": "object"},
    )
    return "both-at-once"


def _open(run_id: str) -> dict[str, Interrupt]:
    return {i.node_id: i for i in Interrupt.unscoped_all_tenants.filter(run__run_id=run_id, resolved_at__isnull=True)}


def test_the_config_is_validated() -> None:
    assert node_config_errors("parallel", {"branches": [{"id": "a", "kind": "input"}]})  # fewer than two
    assert node_config_errors("parallel", {"branches": [{"id": "a b", "kind": "input"}, {"id": "c", "kind": "x"}]})
    assert not node_config_errors("parallel", NODES[0]["config"])


def test_one_step_opens_every_branch_and_the_last_answer_resumes_the_run(acme: Caller) -> None:
    run_id = acme.create_run(_workflow(acme))
    run = advance(run_id)
    assert run.status == RunStatus.WAITING_INPUT  # the first branch's kind
    opened = _open(run_id)
    assert set(opened) == {"ask.who", "ask.ok"}
    assert opened["ask.ok"].payload["key"] == "ask.ok" and opened["ask.ok"].kind == "approval"
    assert event_types(run_id).count("interrupt.requested") == 2

    # One answer: the run keeps waiting, now as the branch still open, and no worker is owed.
    response = acme.post(f"/runs/{run_id}/interrupts/ask.who", {"resumeValue": {"name": "Ada"}})
    assert response.status_code == 200, response.content
    run = Run.unscoped_all_tenants.get(run_id=run_id)
    assert run.status == RunStatus.WAITING_APPROVAL
    assert advance(run_id).status == RunStatus.WAITING_APPROVAL  # a stray worker changes nothing
    assert set(_open(run_id)) == {"ask.ok"}

    # The same branch twice is the usual conflict.
    again = acme.post(f"/runs/{run_id}/interrupts/ask.who", {"resumeValue": {"name": "Bob"}})
    assert again.status_code == 409, again.content

    response = acme.post(f"/runs/{run_id}/interrupts/ask.ok", {"resumeValue": {"action": "accept"}})
    assert response.status_code == 200, response.content
    run = advance(run_id)
    assert run.status == RunStatus.COMPLETED, run.error
    assert run.variables["ask"] == {"who": {"answers": {"name": "Ada"}}, "ok": {"approved": True, "action": "accept"}}
    assert run.outputs == {"finished": True}
    types = event_types(run_id)
    assert types.count("interrupt.resolved") == 2 and types.count("node.completed") == 2
    assert_log_contiguous(run_id)


def test_answers_together_resume_inline_in_one_transaction(
    acme: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    workflow_id = _workflow(acme)
    with django_capture_on_commit_callbacks(execute=True):
        run = run_create(subject=acme.subject, workflow_id=workflow_id, inputs=None, transport="mcp", inline=True)
    assert run.status == RunStatus.WAITING_INPUT
    assert set(_open(run.run_id)) == {"ask.who", "ask.ok"}
    with django_capture_on_commit_callbacks(execute=True):
        run = interrupts_resolve(
            subject=acme.subject,
            run_id=run.run_id,
            resolutions={"ask.who": {"name": "Ada"}, "ask.ok": {"action": "accept"}},
            inline=True,
        )
    assert run.status == RunStatus.COMPLETED
    assert Run.unscoped_all_tenants.get(pk=run.pk).status == RunStatus.COMPLETED
    assert_log_contiguous(run.run_id)


def test_a_refused_answer_refuses_the_whole_batch(acme: Caller) -> None:
    run_id = acme.create_run(_workflow(acme))
    advance(run_id)
    with pytest.raises(ValidationFailed):
        interrupts_resolve(
            subject=acme.subject,
            run_id=run_id,
            resolutions={"ask.who": {"name": "Ada"}, "ask.ok": {"action": "maybe"}},
        )
    assert set(_open(run_id)) == {"ask.who", "ask.ok"}  # neither was spent
    interrupts_resolve(subject=acme.subject, run_id=run_id, resolutions={"ask.who": {"name": "Ada"}})
    with pytest.raises(Conflict):  # one of the batch was answered already: none is taken
        interrupts_resolve(
            subject=acme.subject,
            run_id=run_id,
            resolutions={"ask.who": {"name": "Bob"}, "ask.ok": {"action": "accept"}},
        )
    assert set(_open(run_id)) == {"ask.ok"}


def test_a_rejected_branch_fails_the_node(acme: Caller) -> None:
    run_id = acme.create_run(_workflow(acme))
    advance(run_id)
    interrupts_resolve(
        subject=acme.subject, run_id=run_id, resolutions={"ask.who": {"name": "Ada"}, "ask.ok": {"action": "reject"}}
    )
    run = advance(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "approval_rejected"


def test_another_tenant_cannot_answer(acme: Caller, globex: Caller) -> None:
    run_id = acme.create_run(_workflow(acme))
    advance(run_id)
    response = globex.post(f"/runs/{run_id}/interrupts/ask.who", {"resumeValue": {"name": "Mallory"}})
    assert response.status_code in (403, 404), response.content
    assert set(_open(run_id)) == {"ask.who", "ask.ok"}


def test_a_branch_that_is_not_instant_fails_the_node(acme: Caller) -> None:
    nodes = [
        {
            "id": "ask",
            "kind": "parallel",
            "config": {
                "branches": [
                    {"id": "who", "kind": "input", "config": QUESTION},
                    {"id": "nap", "kind": "delay", "config": {"delayMs": 10}},
                ]
            },
        }
    ]
    run = advance(acme.create_run(_workflow(acme, nodes)))
    assert run.status == RunStatus.FAILED and run.error["code"] == "validation_error"
    assert not Interrupt.unscoped_all_tenants.filter(run=run).exists()


def test_an_echo_template_reads_an_earlier_nodes_output(acme: Caller) -> None:
    nodes = [
        NODES[0],
        {"id": "say", "kind": "echo", "config": {"output": {"text": "Hi {{ask.who.answers.name}}, {{missing.path}}."}}},
    ]
    run_id = acme.create_run(_workflow(acme, nodes))
    advance(run_id)
    interrupts_resolve(
        subject=acme.subject, run_id=run_id, resolutions={"ask.who": {"name": "Ada"}, "ask.ok": {"action": "accept"}}
    )
    assert advance(run_id).outputs == {"text": "Hi Ada, ."}
