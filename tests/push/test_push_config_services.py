"""The services the A2A door calls for the four push-config methods (interop.md §A2A push delivery):
an unreadable task, a foreign configId and an unknown one raise the same NotFound."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from apps.core.egress import EgressRefused
from apps.core.errors import NotFound, ValidationFailed
from apps.push.services import (
    push_config_create,
    push_config_delete,
    push_config_get,
    push_config_list,
    push_config_wire,
)
from tests.core.https_receivers import Receiver
from tests.push.conftest import url_of
from tests.runs.conftest import Caller

pytestmark = pytest.mark.django_db


def _not_found(call: Callable[[], object]) -> tuple[str, str, object]:
    with pytest.raises(NotFound) as caught:
        call()
    return (type(caught.value).__name__, caught.value.message, caught.value.details)


def test_create_get_list_delete(acme: Caller, receiver_for: Callable[..., Receiver]) -> None:
    url = url_of(receiver_for())
    run_id = acme.create_run("conformance-noop")
    config = push_config_create(
        subject=acme.subject, task_id=run_id, url=url, authentication={"scheme": "Bearer", "credentials": "c-1"}
    )
    assert acme.tenant not in config.config_id and "/" not in config.config_id  # encodes no tenant
    got = push_config_get(subject=acme.subject, task_id=run_id, config_id=config.config_id)
    assert got.pk == config.pk
    assert [c.config_id for c in push_config_list(subject=acme.subject, task_id=run_id)] == [config.config_id]
    wire = push_config_wire(got)
    assert (wire.id, wire.task_id, wire.url, wire.authentication.scheme) == (config.config_id, run_id, url, "Bearer")
    assert wire.token == "" and wire.authentication.credentials == ""
    push_config_delete(subject=acme.subject, task_id=run_id, config_id=config.config_id)
    push_config_delete(subject=acme.subject, task_id=run_id, config_id=config.config_id)  # idempotent
    assert push_config_list(subject=acme.subject, task_id=run_id) == []


def test_foreign_and_unknown_answer_the_same(
    acme: Caller, globex: Caller, receiver_for: Callable[..., Receiver]
) -> None:
    url = url_of(receiver_for())
    run_id = acme.create_run("conformance-noop")
    other_run = acme.create_run("conformance-noop")
    config = push_config_create(subject=acme.subject, task_id=run_id, url=url, token="t")
    unknown_task = f"{acme.tenant}/{'x' * 26}"
    unknown = _not_found(lambda: push_config_get(subject=acme.subject, task_id=unknown_task, config_id="nope"))
    answers = [
        # another tenant's task, with or without the right configId
        _not_found(lambda: push_config_get(subject=globex.subject, task_id=run_id, config_id=config.config_id)),
        _not_found(lambda: push_config_list(subject=globex.subject, task_id=run_id)),
        _not_found(lambda: push_config_delete(subject=globex.subject, task_id=run_id, config_id=config.config_id)),
        _not_found(lambda: push_config_create(subject=globex.subject, task_id=run_id, url=url)),
        _not_found(lambda: push_config_get(subject=acme.subject, task_id="garbage", config_id=config.config_id)),
    ]
    # a configId that belongs to another task of the same tenant, or to nothing
    config_unknown = _not_found(lambda: push_config_get(subject=acme.subject, task_id=run_id, config_id="nope"))
    config_foreign = _not_found(
        lambda: push_config_get(subject=acme.subject, task_id=other_run, config_id=config.config_id)
    )
    # Every miss, task-level or config-level, raises the same NotFound with the same message.
    assert all(answer == unknown for answer in [*answers, config_unknown, config_foreign])
    # The foreign delete changed nothing.
    assert push_config_get(subject=acme.subject, task_id=run_id, config_id=config.config_id).pk == config.pk


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/x",
        "https://127.0.0.1.nip.io.invalid/x",
        "https://localhost/x",
        "https://169.254.169.254/latest",
        "https://[::1]/x",
        "https://10.0.0.1/x",
    ],
)
def test_a_forbidden_url_is_refused(acme: Caller, url: str, settings: object) -> None:
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = []  # type: ignore[attr-defined]
    run_id = acme.create_run("conformance-noop")
    with pytest.raises(EgressRefused):
        push_config_create(subject=acme.subject, task_id=run_id, url=url, token="t")


def test_authentication_needs_a_scheme(acme: Caller, receiver_for: Callable[..., Receiver]) -> None:
    run_id = acme.create_run("conformance-noop")
    with pytest.raises(ValidationFailed):
        push_config_create(
            subject=acme.subject, task_id=run_id, url=url_of(receiver_for()), authentication={"credentials": "c"}
        )


def test_a_finished_task_keeps_no_credential(acme: Caller, receiver_for: Callable[..., Receiver]) -> None:
    from tests.runs.conftest import advance

    run_id = acme.create_run("conformance-noop")
    advance(run_id)
    config = push_config_create(subject=acme.subject, task_id=run_id, url=url_of(receiver_for()), token="t-1")
    assert config.credentials_sealed is None and config.auth_scheme == "Bearer"
