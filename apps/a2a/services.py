"""Writes behind the A2A operations: each translates to one runs service and its errors back.

No rule of a run lives here. Starting is `run_create` (transport `a2a`), continuing is
`interrupt_resolve`, cancelling is `run_cancel`; this module only resolves the skill, applies the
map's multi-turn checks (interop.md §A2A multi-turn) and records the A2A Message (history and
messageId de-duplication).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from a2a.types import Message
from a2a.utils.errors import (
    InternalError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.a2a.errors import invalid_params, rate_limit_exceeded
from apps.a2a.models import (
    CardSigningKey,
    CardSigningKeyAction,
    CardSigningKeyChange,
    CardSigningKeyState,
    SkillRoute,
    SkillRoutePin,
    SkillRoutePinAction,
    SkillRoutePinChange,
    TaskMessage,
)
from apps.a2a.selectors import skill_route_pin_current, task_message_find, task_run_readable
from apps.a2a.signing import key_material_generate
from apps.agents.fixtures import FIXTURE_WORKFLOWS
from apps.agents.selectors import InventoryEntry
from apps.core.errors import Conflict, Forbidden, NotFound, RateLimited, ValidationFailed
from apps.core.invalidation import TOPIC_CARD, cached, invalidate_on_commit
from apps.runs.a2a_wire import context_id_of, to_wire
from apps.runs.models import Run
from apps.runs.selectors import run_open_interrupt
from apps.runs.services import interrupt_resolve, run_cancel, run_create
from apps.tenants.subject import Subject

logger = logging.getLogger(__name__)

# What a message naming no skill runs on a fresh host: `echo`, so a first "hello" answers (issue 53
# item 6). The conformance legs (openwop-v2 reference (i).16) get `conformance-approval` from the
# conformance profile's pin (apps/conformance/services.py), not from this default; a host seeded
# before keeps the default its routing table holds (the admin's skill routes change it).
DEFAULT_SKILL = "echo"


# ---------------------------------------------------------------------------------------------
# Skill routing


def skill_routes_ensure() -> None:
    """Seed the routing table with the fixture workflows when it is empty (a fresh host, or a test
    database just flushed). Operators then edit it in the admin; disable a route, don't delete all."""
    if SkillRoute.objects.exists():
        return
    ordered = [DEFAULT_SKILL, *sorted(w for w in FIXTURE_WORKFLOWS if w != DEFAULT_SKILL)]
    try:
        with transaction.atomic():
            for position, workflow_id in enumerate(ordered):
                fixture = FIXTURE_WORKFLOWS[workflow_id]
                SkillRoute.objects.create(
                    workflow_id=workflow_id,
                    name=fixture["name"],
                    description=fixture["description"],
                    tags=["openwop", "fixture"],
                    position=position,
                    is_default=workflow_id == DEFAULT_SKILL,
                )
    except IntegrityError:  # seeded concurrently by another request
        pass


def skill_resolve(skill_id: str | None) -> SkillRoute:
    """The routed skill a message names, else the host default; -32602 naming the skill otherwise
    (map SendMessage row: an unknown or unroutable skill). While a pin exists the pinned skill is
    the only one routed, and the default."""
    pin = skill_route_pin_current()
    if pin is not None:
        if skill_id is None or skill_id == pin.route.workflow_id:
            return pin.route
        raise invalid_params(f"Unknown or unroutable skill {skill_id!r}.", field="skillId")
    routes = SkillRoute.objects.filter(enabled=True)
    wanted = routes.filter(is_default=True) if skill_id is None else routes.filter(workflow_id=skill_id)
    route = wanted.first()
    if route is None and not SkillRoute.objects.exists():  # seed an empty table only on a miss
        skill_routes_ensure()
        route = wanted.first()
    if route is None:
        if skill_id is None:
            raise invalid_params("No skill was named and the host routes no default skill.", field="skillId")
        raise invalid_params(f"Unknown or unroutable skill {skill_id!r}.", field="skillId")
    return route


def skill_workflow_cached(skill_id: str | None) -> str:
    """`skill_resolve(skill_id).workflow_id` from this process's cache (topic `card`: any write to
    the skill routes empties it in every process, apps/core/invalidation.py). A refusal is never
    cached: it raises from `skill_resolve` every time."""
    return cached(TOPIC_CARD, ("skill", skill_id), lambda: skill_resolve(skill_id).workflow_id)


def skill_route_enabled(workflow_id: str) -> bool:
    skill_routes_ensure()
    pin = skill_route_pin_current()
    if pin is not None:
        return pin.route.workflow_id == workflow_id
    return SkillRoute.objects.filter(enabled=True, workflow_id=workflow_id).exists()


def skill_route_pin(*, workflow_id: str, actor: str) -> SkillRoutePin:
    """Route only `workflow_id` (its route must exist; enabled or not, the pin routes it), audited.
    Idempotent: pinning what is already pinned changes nothing and writes no audit row. The
    routing table is not touched, so `skill_route_unpin` gives back exactly the routes before."""
    skill_routes_ensure()
    with transaction.atomic(durable=True):
        route = SkillRoute.objects.select_for_update().filter(workflow_id=workflow_id).first()
        if route is None:
            raise ValidationFailed(f"No skill route for {workflow_id!r}.", details={"field": "workflowId"})
        pin = SkillRoutePin.objects.select_for_update().select_related("route").first()
        if pin is not None and pin.route.workflow_id == workflow_id:
            return pin
        before = pin.route.workflow_id if pin is not None else ""
        if pin is not None:
            pin.delete()
        pin = SkillRoutePin.objects.create(route=route, actor=actor)
        SkillRoutePinChange.objects.create(
            actor=actor, action=SkillRoutePinAction.PIN, before=before, after=workflow_id
        )
        invalidate_on_commit(TOPIC_CARD)
    return pin


def skill_route_unpin(*, actor: str) -> bool:
    """Route every enabled route again, audited; False (and no audit row) when nothing was pinned."""
    with transaction.atomic(durable=True):
        pin = SkillRoutePin.objects.select_for_update().select_related("route").first()
        if pin is None:
            return False
        before = pin.route.workflow_id
        pin.delete()
        SkillRoutePinChange.objects.create(actor=actor, action=SkillRoutePinAction.UNPIN, before=before, after="")
        invalidate_on_commit(TOPIC_CARD)
    return True


def agent_skill_resolve(*, entry: InventoryEntry, skill_id: str | None) -> str:
    """The workflow a message to an agent (`tenant: R`) starts: the named skill when it is one of
    the workflows routed to the agent, else the agent's default (first routed) workflow. The same
    -32602 as `skill_resolve` otherwise: the agent's card lists exactly these skills."""
    routed = [workflow.workflow_id for workflow in entry.workflows]
    if skill_id is None:
        return routed[0]  # an entry with an R has at least one routed workflow
    if skill_id not in routed:
        raise invalid_params(f"Unknown or unroutable skill {skill_id!r}.", field="skillId")
    return skill_id


# ---------------------------------------------------------------------------------------------
# Messages


Records = Callable[[Run], None]


def _with_message(subject: Subject, message: Message, records: Records | None) -> Records:
    """`records` after the Message record (history, and the messageId de-duplication record),
    written in the transaction that starts or resumes the run: unique per (tenant, principal,
    messageId)."""

    def write(run: Run) -> None:
        document = {**to_wire(message), "taskId": run.run_id, "contextId": context_id_of(run)}
        TaskMessage.objects.create(
            tenant_id=run.tenant_id,
            run=run,
            principal=subject.subject_id,
            message_id=message.message_id,
            document=document,
        )
        if records is not None:
            records(run)

    return write


def message_start(
    *,
    subject: Subject,
    message: Message,
    workflow_id: str,
    inputs: dict[str, Any],
    context_id: str | None,
    agent_id: str | None = None,
    inline: bool = False,
    records: Records | None = None,
) -> Run:
    """SendMessage without taskId -> createRun. A messageId this principal already sent answers
    with its first task. The Message record commits with the run (`run_create`'s one transaction),
    so its unique constraint is the de-duplication: of two copies racing each other, the second
    waits for the first's commit, rolls back whole, and answers with the first's task. `inline`:
    see `run_create` (a blocking send gets the run settled); `records(run)`: the door's further
    rows in that transaction (the request's push config)."""
    seen = task_message_find(subject=subject, message_id=message.message_id)
    if seen is not None:
        return seen.run
    # interop.md §Trace context: metadata.openwop.traceparent seeds the run's trace (malformed: ignored).
    openwop = (to_wire(message).get("metadata") or {}).get("openwop")
    trace = openwop if isinstance(openwop, dict) else {}
    try:
        return run_create(
            subject=subject,
            workflow_id=workflow_id,
            inputs=inputs,
            transport="a2a",
            context_id=context_id,
            agent_id=agent_id,
            traceparent=trace.get("traceparent"),
            tracestate=trace.get("tracestate"),
            inline=inline,
            records=_with_message(subject, message, records),
        )
    except NotFound:
        raise invalid_params(f"Unknown or unroutable skill {workflow_id!r}.", field="skillId") from None
    except RateLimited as exc:  # a tenant budget (apps/runs/budgets.py): nothing was written
        raise rate_limit_exceeded(exc) from None
    except ValidationFailed as exc:
        raise invalid_params(exc.message, field="message") from None
    except IntegrityError:
        seen = task_message_find(subject=subject, message_id=message.message_id)
        if seen is None:
            raise
        return seen.run


def message_continue(
    *,
    subject: Subject,
    task_id: str,
    message: Message,
    resume_value: Any,
    inline: bool = False,
    records: Records | None = None,
) -> Run:
    """SendMessage with taskId -> resolveInterruptByRun, under the map's multi-turn rules. The
    Message record commits with the resume; `inline` and `records` as in `message_start`."""
    run = task_run_readable(subject=subject, task_id=task_id)
    if _sent_before(subject, message, run):
        return run  # a repeat: it resumed the task once already
    if message.context_id and message.context_id != context_id_of(run):
        raise invalid_params("The message's contextId is not its task's contextId.", field="message.contextId")
    if run.is_terminal:
        raise UnsupportedOperationError(f"The task is {run.status}; it accepts no further messages.")
    interrupt = run_open_interrupt(run=run)
    if interrupt is None:
        # Map row "taskId; run not suspended, not terminal": no declared input path, refuse.
        raise UnsupportedOperationError("The task is not waiting for input.")
    if resume_value is None:
        raise invalid_params(
            "A message to a waiting task carries its resume value in metadata.openwop.interrupt or a data part.",
            field="message.parts",
        )
    try:
        return interrupt_resolve(
            subject=subject,
            run_id=run.run_id,
            node_id=interrupt.node_id,
            resume_value=resume_value,
            inline=inline,
            records=_with_message(subject, message, records),
        )
    except NotFound:
        raise TaskNotFoundError() from None
    except ValidationFailed as exc:
        raise invalid_params(exc.message, field="metadata.openwop.interrupt") from None
    except Forbidden as exc:
        raise invalid_params(exc.message, field="message") from None
    except Conflict as exc:
        raise UnsupportedOperationError(exc.message) from None
    except IntegrityError:
        # The same messageId was recorded meanwhile (the Message record's unique constraint).
        if not _sent_before(subject, message, run):
            raise
        return task_run_readable(subject=subject, task_id=task_id)


def _sent_before(subject: Subject, message: Message, run: Run) -> bool:
    """Whether this principal already sent the messageId: to `run` (a repeat), or to another task
    (-32602)."""
    seen = task_message_find(subject=subject, message_id=message.message_id)
    if seen is not None and seen.run_id != run.pk:
        raise invalid_params("This messageId was already sent to another task.", field="message.messageId")
    return seen is not None


def task_cancel(*, subject: Subject, task_id: str) -> Run:
    """CancelTask -> cancelRun; a terminal run is TaskNotCancelableError (-32002)."""
    run = task_run_readable(subject=subject, task_id=task_id)
    try:
        return run_cancel(subject=subject, run_id=run.run_id, reason="cancelled over A2A")
    except NotFound:
        raise TaskNotFoundError() from None
    except Conflict as exc:
        if exc.code == "run_terminal":
            raise TaskNotCancelableError(f"The task is already {run.status}.") from None
        logger.warning("a2a: unexpected run error %s", exc.code)
        raise InternalError() from None


# ---------------------------------------------------------------------------------------------
# Card signing keys. Each change and its audit row commit together (STYLE.md habit 6);
# the key table's trigger empties every process's card caches, this process's on commit already.


def _card_key_state(key: CardSigningKey) -> dict[str, Any]:
    """What the audit row records of a key: never its key material."""
    return {
        "kid": key.kid,
        "algorithm": key.algorithm,
        "state": key.state,
        "activatedAt": key.activated_at.isoformat() if key.activated_at else None,
        "retiredAt": key.retired_at.isoformat() if key.retired_at else None,
    }


def _card_key_audit(*, key: CardSigningKey, actor: str, action: str, before: dict[str, Any] | None) -> None:
    CardSigningKeyChange.objects.create(
        key=key, kid=key.kid, actor=actor, action=action, before=before, after=_card_key_state(key)
    )


def card_key_generate(*, algorithm: str, actor: str) -> CardSigningKey:
    """A new key pair (generated, not yet signing), its private half sealed. Not durable: the
    admin's add form calls it inside its own transaction."""
    material = key_material_generate(algorithm=algorithm)
    with transaction.atomic():
        key = CardSigningKey.objects.create(
            kid=material.kid,
            algorithm=algorithm,
            public_jwk=material.public_jwk,
            private_key_sealed=material.private_key_sealed,
        )
        _card_key_audit(key=key, actor=actor, action=CardSigningKeyAction.GENERATE, before=None)
    return key


def _card_key_retire_locked(key: CardSigningKey, *, actor: str, at: Any) -> None:
    before = _card_key_state(key)
    key.state = CardSigningKeyState.RETIRED
    key.retired_at = at
    key.save(update_fields=["state", "retired_at"])
    _card_key_audit(key=key, actor=actor, action=CardSigningKeyAction.RETIRE, before=before)


def card_key_activate(*, key_pk: int, actor: str) -> CardSigningKey:
    """Make the key the one that signs every card; the key active until now is retired in the same
    transaction (and stays in the JWKS for the grace window). A retired key is never reactivated."""
    with transaction.atomic(durable=True):
        # Every key row locked in one order: two concurrent activations serialize here.
        keys = {k.pk: k for k in CardSigningKey.objects.select_for_update().order_by("pk")}
        key = keys.get(key_pk)
        if key is None:
            raise NotFound("No such card signing key.")
        if key.state == CardSigningKeyState.ACTIVE:
            return key
        if key.state == CardSigningKeyState.RETIRED:
            raise ValidationFailed(f"The key {key.kid} is retired; generate a new key instead.")
        now = timezone.now()
        for previous in keys.values():
            if previous.state == CardSigningKeyState.ACTIVE:
                _card_key_retire_locked(previous, actor=actor, at=now)
        before = _card_key_state(key)
        key.state = CardSigningKeyState.ACTIVE
        key.activated_at = now
        key.save(update_fields=["state", "activated_at"])
        _card_key_audit(key=key, actor=actor, action=CardSigningKeyAction.ACTIVATE, before=before)
        invalidate_on_commit(TOPIC_CARD)
    return key


def card_key_retire(*, key_pk: int, actor: str) -> CardSigningKey:
    """Stop signing with the key (if it was active, cards go out unsigned until another key is
    activated); it stays in the JWKS for the grace window. Retiring a retired key changes nothing."""
    with transaction.atomic(durable=True):
        key = CardSigningKey.objects.select_for_update().filter(pk=key_pk).first()
        if key is None:
            raise NotFound("No such card signing key.")
        if key.state == CardSigningKeyState.RETIRED:
            return key
        _card_key_retire_locked(key, actor=actor, at=timezone.now())
        invalidate_on_commit(TOPIC_CARD)
    return key
