"""resolveInterruptByRun (interrupt.md §Resolve surfaces): validated, resolved exactly once."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from apps.core.errors import Conflict
from apps.runs.models import Interrupt, RunStatus
from apps.runs.services import interrupt_resolve
from tests.envelope import assert_envelope
from tests.runs.conftest import Caller, advance, event_types


def _resolve(caller: Caller, run_id: str, node_id: str, body: object):  # type: ignore[no-untyped-def]
    return caller.post(f"/runs/{run_id.replace('/', '~2F')}/interrupts/{node_id}", body)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "resume_value",
    [
        {"action": "maybe"},
        {"comment": "no action"},
        {"action": "accept", "extra": 1},
        "accept",
        {"action": "accept", "comment": 3},
    ],
)
def test_approval_resume_value_is_validated(acme: Caller, resume_value: object) -> None:
    run_id = acme.create_run("conformance-approval")
    advance(run_id)
    body = assert_envelope(_resolve(acme, run_id, "approve", {"resumeValue": resume_value}), "validation_error", 400)
    assert body["details"]["field"] == "resumeValue"
    assert Interrupt.unscoped_all_tenants.get(run__run_id=run_id).resolved_at is None


@pytest.mark.django_db
def test_body_must_carry_resume_value_and_nothing_else(acme: Caller) -> None:
    run_id = acme.create_run("conformance-approval")
    advance(run_id)
    assert_envelope(_resolve(acme, run_id, "approve", {}), "validation_error", 400)
    assert_envelope(
        _resolve(acme, run_id, "approve", {"resumeValue": {"action": "accept"}, "x": 1}), "validation_error", 400
    )


@pytest.mark.django_db
def test_unknown_node_is_not_found(acme: Caller) -> None:
    run_id = acme.create_run("conformance-approval")
    advance(run_id)
    assert_envelope(_resolve(acme, run_id, "nope", {"resumeValue": {"action": "accept"}}), "not_found", 404)


@pytest.mark.django_db
def test_second_resolve_is_already_resolved(acme: Caller) -> None:
    run_id = acme.create_run("conformance-approval")
    advance(run_id)
    assert _resolve(acme, run_id, "approve", {"resumeValue": {"action": "accept"}}).status_code == 200
    assert_envelope(
        _resolve(acme, run_id, "approve", {"resumeValue": {"action": "accept"}}), "interrupt_already_resolved", 409
    )
    assert event_types(run_id).count("interrupt.resolved") == 1


@pytest.mark.django_db
def test_input_node_answer_becomes_outputs(acme: Caller) -> None:
    from apps.agents.services import workflow_create
    from apps.tenants.models import Tenant

    workflow_create(
        tenant=Tenant.objects.get(slug="acme"),
        workflow_id="ask",
        definition={
            "nodes": [{"id": "q", "kind": "input", "config": {"questions": [{"id": "name", "question": "Name?"}]}}]
        },
        input_schema={"type": "object"},
    )
    run_id = acme.create_run("ask")
    assert advance(run_id).status == RunStatus.WAITING_INPUT
    assert _resolve(acme, run_id, "q", {"resumeValue": {"name": "Ada"}}).status_code == 200
    run = advance(run_id)
    assert run.status == RunStatus.COMPLETED and run.outputs == {"answers": {"name": "Ada"}}


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_resolves_exactly_one_wins(acme: Caller, sent_advances) -> None:  # type: ignore[no-untyped-def]
    """Two threads, two database connections, released together: one 200-equivalent, one 409."""
    run_id = acme.create_run("conformance-approval")
    advance(run_id)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []
    lock = threading.Lock()

    def resolve(action: str) -> None:
        try:
            barrier.wait(timeout=10)
            interrupt_resolve(subject=acme.subject, run_id=run_id, node_id="approve", resume_value={"action": action})
            result = "won"
        except Conflict as exc:
            result = exc.code
        finally:
            connection.close()
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=resolve, args=(a,)) for a in ("accept", "reject")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["interrupt_already_resolved", "won"]
    assert event_types(run_id).count("interrupt.resolved") == 1
    # One message for the create, one for the winning resolve; the loser sent nothing.
    assert [args for args, _ in sent_advances] == [[run_id], [run_id]]


@pytest.mark.django_db
def test_interrupt_by_id_is_readable_only_in_its_tenant(acme: Caller, globex: Caller) -> None:
    from apps.core.errors import NotFound
    from apps.runs.selectors import interrupt_get_readable

    run_id = acme.create_run("conformance-approval")
    advance(run_id)
    interrupt_id = Interrupt.unscoped_all_tenants.get(run__run_id=run_id).interrupt_id
    assert interrupt_get_readable(subject=acme.subject, interrupt_id=interrupt_id).run.run_id == run_id
    with pytest.raises(NotFound) as foreign:
        interrupt_get_readable(subject=globex.subject, interrupt_id=interrupt_id)
    with pytest.raises(NotFound) as unknown:
        interrupt_get_readable(subject=globex.subject, interrupt_id="globex/" + "x" * 26)
    assert foreign.value.envelope() == unknown.value.envelope()
