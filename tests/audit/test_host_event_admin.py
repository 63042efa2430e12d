"""Host events in the admin: browsable by operators and auditors, never added, changed or deleted."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from apps.audit.services import host_event_append

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/audit/hostevent/"


@pytest.fixture
def event(make_subject):  # type: ignore[no-untyped-def]
    _, alice = make_subject("acme")
    return host_event_append(subject=alice, type="negotiation.decided", payload={"outcome": "accepted"}, durable=True)


@pytest.fixture
def auditor_client(client: Client) -> Client:
    user = User.objects.create_user("aud", "aud@example.test", "pw-not-used-elsewhere", is_staff=True)
    user.groups.add(Group.objects.get(name="auditors"))
    client.force_login(user)
    return client


@pytest.fixture
def superuser_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("op", "op@example.test", "pw-not-used-elsewhere"))
    return client


@pytest.mark.parametrize("who", ["superuser_client", "auditor_client"])
def test_read_only_for_everyone(request, event, who: str) -> None:  # type: ignore[no-untyped-def]
    client: Client = request.getfixturevalue(who)
    listing = client.get(CHANGELIST)
    assert listing.status_code == 200
    assert event.event_id in listing.content.decode()
    detail = client.get(f"{CHANGELIST}{event.pk}/change/")
    assert detail.status_code == 200
    page = detail.content.decode()
    assert event.event_id in page and 'name="_save"' not in page
    assert client.get(f"{CHANGELIST}add/").status_code == 403
    assert client.get(f"{CHANGELIST}{event.pk}/delete/").status_code == 403
    assert client.post(f"{CHANGELIST}{event.pk}/change/", {"type": "x.y"}).status_code == 403
    bulk = client.post(CHANGELIST, {"action": "delete_selected", "_selected_action": [event.pk]})
    assert bulk.status_code in (200, 302)
    event.refresh_from_db()
    assert event.type == "negotiation.decided"
    assert type(event).objects.for_tenant(event.tenant_id).count() == 1


def test_staff_without_the_auditor_role_sees_nothing(client: Client, event) -> None:  # type: ignore[no-untyped-def]
    client.force_login(User.objects.create_user("staff", "s@example.test", "pw-not-used-elsewhere", is_staff=True))
    assert client.get(CHANGELIST).status_code == 403
