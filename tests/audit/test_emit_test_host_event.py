"""`POST /host/events/test` (RFC 0241 §B): bound exactly while the host-test types are listed, which
is while the conformance seams are on; emits into the caller's own stream through the ordinary path."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from apps.audit.host_event_types import Delivery
from apps.audit.models import HostEvent
from apps.audit.services import host_event_emit_test
from apps.core.errors import ValidationFailed
from apps.tenants.models import Tenant
from tests.envelope import assert_envelope

URL = "/host/events/test"
pytestmark = pytest.mark.django_db
seams_on = override_settings(OPENWOP_CONFORMANCE_SEAMS=True)


def _post(client: Client, key: str | None, body: object):  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return client.post(URL, body, content_type="application/json", headers=headers)


def test_not_served_while_the_seams_are_off(client: Client, make_key) -> None:  # type: ignore[no-untyped-def]
    assert_envelope(_post(client, make_key(), {"delivery": "durable"}), "not_found", 404)
    assert_envelope(_post(client, None, {"delivery": "durable"}), "not_found", 404)
    assert not HostEvent.unscoped_all_tenants.exists()


@seams_on
@pytest.mark.parametrize(
    ("delivery", "type_name"),
    [
        ("durable", "host-test.durable-triggered"),
        ("ephemeral", "host-test.ephemeral-triggered"),
    ],
)
def test_emits_one_empty_event_of_the_reserved_type(client: Client, make_subject, delivery, type_name) -> None:  # type: ignore[no-untyped-def]
    key, alice = make_subject("acme")
    response = _post(client, key, {"delivery": delivery})
    assert response.status_code == 202
    assert response.json() == {"eventId": response.json()["eventId"], "type": type_name}
    event = HostEvent.objects.for_tenant(Tenant.objects.get(slug="acme")).get()
    assert event.event_id == response.json()["eventId"]
    assert (event.subject_id, event.type, event.payload) == (alice.subject_id, type_name, {})
    assert event.durable is (delivery == "durable")


@seams_on
@pytest.mark.parametrize(
    "body", [{}, {"delivery": "sometimes"}, {"delivery": "durable", "type": "negotiation.decided"}]
)
def test_body_is_closed_and_validated(client: Client, make_key, body) -> None:  # type: ignore[no-untyped-def]
    assert_envelope(_post(client, make_key(), body), "validation_error", 400)
    assert not HostEvent.unscoped_all_tenants.exists()


@seams_on
def test_needs_a_credential(client: Client) -> None:
    assert_envelope(_post(client, None, {"delivery": "durable"}), "unauthenticated", 401)


@seams_on
def test_workspace_of_another_tenant_is_refused(client: Client, make_key) -> None:  # type: ignore[no-untyped-def]
    key = make_key("acme")
    make_key("globex")
    foreign = _post(client, key, {"delivery": "durable", "workspaceId": "globex/ws-0123456789abcdef"})
    assert_envelope(foreign, "id_tenant_mismatch", 403)
    unknown = _post(client, key, {"delivery": "durable", "workspaceId": "acme/ws-0123456789abcdef"})
    assert_envelope(unknown, "not_found", 404)
    assert not HostEvent.unscoped_all_tenants.exists()


def test_service_refuses_a_class_whose_type_is_not_listed(make_subject) -> None:  # type: ignore[no-untyped-def]
    _, alice = make_subject()
    with pytest.raises(ValidationFailed):  # seams off: neither host-test type is listed
        host_event_emit_test(subject=alice, delivery=Delivery.DURABLE)
    assert not HostEvent.unscoped_all_tenants.exists()
