"""The host's scheduled floor in the admin (issue 53 item 5): edited on the facet's change form,
checked by the same rules as `facet_set --at` (facet_floor_schedule_errors), written by the same
audited service, CSRF-protected and for staff only."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from apps.facets.models import Facet, FacetChange
from apps.facets.services import facet_ensure, facet_floor_schedule, facet_update

pytestmark = pytest.mark.django_db

URL = "/admin/facets/facet/mcp/change/"
OLDEST, OLD, NEW = "2025-06-18", "2025-11-25", "2026-07-28"


@pytest.fixture
def operator_client(client: Client) -> Client:
    facet_ensure(protocol="mcp")
    facet_update(protocol="mcp", changes={"versions": [NEW, OLD, OLDEST], "minimum_version": OLDEST}, actor="test")
    client.force_login(User.objects.create_superuser("opal", "opal@example.test", "pw"))
    return client


def _form(client: Client, **changes: Any) -> dict[str, Any]:
    """The change form as the page fills it, with `changes` typed over it."""
    form = client.get(URL).context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data = {name: value.strftime("%Y-%m-%dT%H:%M:%S") if isinstance(value, dt.datetime) else value
            for name, value in data.items()}  # fmt: skip
    return {**data, **changes}


def _at(days: int) -> dt.datetime:
    return (timezone.now() + dt.timedelta(days=days)).replace(microsecond=0)


def test_the_operator_schedules_and_cancels_the_host_floor_audited(operator_client: Client) -> None:
    page = operator_client.get(URL).content.decode()
    assert 'name="schedule_minimum"' in page and 'name="schedule_at"' in page
    assert f'<option value="{OLD}">{OLD}</option>' in page  # the offered versions, not free text

    at = _at(10)
    saved = operator_client.post(URL, _form(operator_client, schedule_minimum=OLD,
                                            schedule_at=at.strftime("%Y-%m-%dT%H:%M:%S")))  # fmt: skip
    assert saved.status_code == 302, saved.content.decode()[-2000:]
    facet = Facet.objects.get(protocol="mcp")
    assert (facet.scheduled_minimum_version, facet.scheduled_at) == (OLD, at)
    assert facet.minimum_version == OLDEST  # the floor in force is unchanged until the date
    change = FacetChange.objects.filter(actor="admin:opal").get()
    assert change.before["scheduled_minimum_version"] == "" and change.after["scheduled_minimum_version"] == OLD
    assert change.after["scheduled_at"] == at.isoformat()

    listing = operator_client.get("/admin/facets/facet/").content.decode()
    assert f"{OLD} from {at:%Y-%m-%d %H:%M:%S} UTC" in listing

    # Another save that leaves the schedule alone writes no schedule change.
    operator_client.post(URL, _form(operator_client, mrtr_max_rounds="5"))
    assert Facet.objects.get(protocol="mcp").scheduled_minimum_version == OLD
    assert [c.after.get("scheduled_minimum_version") for c in FacetChange.objects.filter(actor="admin:opal")] == [
        None,
        OLD,  # newest first: the mrtr edit (facet_update's row) has no schedule in it
    ]

    cancelled = operator_client.post(URL, _form(operator_client, schedule_minimum="", schedule_at=""))
    assert cancelled.status_code == 302
    facet = Facet.objects.get(protocol="mcp")
    assert (facet.scheduled_minimum_version, facet.scheduled_at) == ("", None)
    latest = FacetChange.objects.filter(actor="admin:opal").first()
    assert latest is not None and latest.after["scheduled_minimum_version"] == ""


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ({"schedule_minimum": OLD, "schedule_at": ""}, "needs both a version and the date"),
        ({"schedule_minimum": OLD, "schedule_at": "2001-01-01T00:00:00"}, "is not in the future"),
        ({"schedule_minimum": "2024-11-05", "schedule_at": "in-10-days"}, "must be one of the offered revisions"),
    ],
)
def test_the_form_refuses_what_the_command_refuses_and_changes_nothing(
    operator_client: Client, schedule: dict[str, str], message: str
) -> None:
    if schedule["schedule_at"] == "in-10-days":
        schedule = {**schedule, "schedule_at": _at(10).strftime("%Y-%m-%dT%H:%M:%S")}
    before = FacetChange.objects.count()
    refused = operator_client.post(URL, _form(operator_client, **schedule))
    assert refused.status_code == 200 and message in refused.content.decode()
    facet = Facet.objects.get(protocol="mcp")
    assert (facet.scheduled_minimum_version, facet.scheduled_at) == ("", None)
    assert FacetChange.objects.count() == before
    # The same message from the service the command calls: one rule, one path.
    minimum = schedule["schedule_minimum"]
    at = dt.datetime.fromisoformat(schedule["schedule_at"]).replace(tzinfo=dt.UTC) if schedule["schedule_at"] else None
    from apps.core.errors import ValidationFailed

    with pytest.raises(ValidationFailed, match=message):
        facet_floor_schedule(protocol="mcp", minimum=minimum, at=at, actor="test")


def test_the_schedule_is_checked_against_the_versions_this_save_offers(operator_client: Client) -> None:
    """Dropping the scheduled version from the offered list in the same save is refused as
    `facet_set` would refuse it after the edit, and neither change is made."""
    at = _at(5).strftime("%Y-%m-%dT%H:%M:%S")
    refused = operator_client.post(
        URL, _form(operator_client, versions=f'["{NEW}", "{OLDEST}"]', schedule_minimum=OLD, schedule_at=at)
    )
    assert refused.status_code == 200 and "The scheduled host floor" in refused.content.decode()
    assert Facet.objects.get(protocol="mcp").versions == [NEW, OLD, OLDEST]


def test_scheduling_needs_a_csrf_token_and_staff(operator_client: Client) -> None:
    data = _form(operator_client, schedule_minimum=OLD, schedule_at=_at(3).strftime("%Y-%m-%dT%H:%M:%S"))
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(User.objects.get(username="opal"))
    assert strict.post(URL, data).status_code == 403
    outsider = Client()
    outsider.force_login(User.objects.create_user("tess", "tess@example.test", "pw"))  # not staff
    assert outsider.post(URL, data).status_code == 302  # to the admin's login
    assert Facet.objects.get(protocol="mcp").scheduled_minimum_version == ""
