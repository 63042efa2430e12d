"""What-if on the deprecation page (issue 53 item 5): it lists the tenants and peers the floor it
tried would refuse (bounded, with the whole count) and offers operators to schedule that floor
through the one service (`facet_floor_schedule`, as `facet_set --at`), CSRF-protected."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from apps.audit.deprecation import what_if, what_if_who
from apps.facets.models import Facet, FacetChange
from apps.facets.services import facet_ensure, facet_update
from tests.audit.test_deprecation import P1, P3, _world
from tests.browser import roles

pytestmark = pytest.mark.django_db

URL = "/host/openwop-host/deprecation/"
SCHEDULE = "/host/openwop-host/deprecation/schedule/"
NEW, MID, OLD = "2026-07-28", "2025-11-25", "2025-06-18"


@pytest.fixture
def operator_client(client: Client) -> Client:
    facet_ensure(protocol="mcp")
    facet_update(protocol="mcp", changes={"versions": [NEW, MID, OLD], "minimum_version": OLD}, actor="test")
    account = roles.operator()
    client.login(username=account.username, password=account.password)
    return client


def _at(days: int) -> str:
    return (timezone.now() + dt.timedelta(days=days)).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%S")


def test_who_lists_tenants_and_peers_most_newly_broken_first_bounded() -> None:
    _world()
    outcome = what_if(protocol="mcp", floor="2025-03-26")
    who = what_if_who(outcome=outcome)
    # acme: 3 exchanges of 2024-11-05 (2 accepted); globex: 2 (2 accepted): the tie goes to more exchanges.
    assert [(t.tenant, t.exchanges, t.accepted) for t in who.tenants] == [("acme", 3, 2), ("globex", 2, 2)]
    assert [(p.peer_digest, p.tenants, p.exchanges) for p in who.peers] == [(P1, 2, 4)]  # no digest: no peer
    assert (who.tenant_count, who.peer_count) == (2, 1)
    bounded = what_if_who(outcome=outcome, limit=1)
    assert [t.tenant for t in bounded.tenants] == ["acme"] and bounded.tenant_count == 2
    nothing = what_if_who(outcome=what_if(protocol="mcp", floor="2024-01-01"))
    assert (nothing.tenants, nothing.peers, nothing.tenant_count) == ([], [], 0)


def test_the_page_lists_who_would_break_and_offers_operators_the_schedule(operator_client: Client) -> None:
    _world()
    page = operator_client.get(URL, {"whatif_protocol": "mcp", "floor": MID}).content.decode()
    assert re.findall(r'class="whatif-tenant" data-tenant="([^"]+)"', page) == ["acme", "globex"]
    # Below 2025-11-25: 2024-11-05 and 2025-03-26. acme 5 exchanges (4 accepted), globex 3 (3).
    assert re.findall(r'class="whatif-peer" data-peer="([^"]+)"', page) == [P1, P3]
    assert 'id="whatif-tenants-count">2 tenants.' in page
    form = page.split('id="schedule-form"')[1].split("</form>")[0]
    assert 'name="csrfmiddlewaretoken"' in form and f'name="floor" value="{MID}"' in form
    assert 'name="protocol" value="mcp"' in form

    at = _at(14)
    done = operator_client.post(SCHEDULE, {"protocol": "mcp", "floor": MID, "at": at}, follow=True)
    assert done.redirect_chain[-1][0] == "/admin/facets/facet/mcp/change/"
    facet = Facet.objects.get(protocol="mcp")
    assert facet.scheduled_minimum_version == MID and facet.scheduled_at == dt.datetime.fromisoformat(at).replace(
        tzinfo=dt.UTC
    )
    assert facet.minimum_version == OLD
    assert FacetChange.objects.filter(actor="admin:olga-operator").count() == 1
    assert f"Scheduled the mcp host floor {MID} from {at.replace('T', ' ')} UTC." in [
        str(m) for m in done.context["messages"]
    ]


def test_a_refused_schedule_says_why_and_changes_nothing(operator_client: Client) -> None:
    _world()
    refused = operator_client.post(SCHEDULE, {"protocol": "mcp", "floor": "2025-03-26", "at": _at(3)}, follow=True)
    page = refused.content.decode()
    assert "Nothing was scheduled." in page and "must be one of the offered revisions" in page
    assert refused.redirect_chain[-1][0].startswith(URL) and 'data-whatif="exchanges"' in page  # back at the what-if
    past = operator_client.post(SCHEDULE, {"protocol": "mcp", "floor": MID, "at": "2001-01-01T00:00:00"}, follow=True)
    assert "is not in the future" in past.content.decode()
    odd = operator_client.post(SCHEDULE, {"protocol": "mcp", "floor": '<b>"x"</b>', "at": _at(3)}, follow=True)
    assert '<b>"x"</b>' not in odd.content.decode()  # the caller's string, escaped wherever it is shown
    assert Facet.objects.get(protocol="mcp").scheduled_at is None
    assert not FacetChange.objects.filter(actor="admin:olga-operator").exists()


def test_only_staff_who_may_change_facets_schedule_and_only_with_csrf(client: Client) -> None:
    _world()
    facet_ensure(protocol="mcp")
    auditor = roles.auditor()
    client.login(username=auditor.username, password=auditor.password)
    page = client.get(URL, {"whatif_protocol": "mcp", "floor": MID}).content.decode()
    assert 'id="whatif-tenants"' in page and 'id="schedule-form"' not in page  # auditors read, never schedule
    assert client.post(SCHEDULE, {"protocol": "mcp", "floor": MID, "at": _at(3)}).status_code == 403
    assert client.get(SCHEDULE).status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(User.objects.create_superuser("root", password=roles.PASSWORD))
    assert strict.post(SCHEDULE, {"protocol": "mcp", "floor": MID, "at": _at(3)}).status_code == 403
    anonymous = Client().post(SCHEDULE, {"protocol": "mcp", "floor": MID, "at": _at(3)})
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/admin/login/")
    assert Facet.objects.get(protocol="mcp").scheduled_at is None
