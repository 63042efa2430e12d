"""The `operators` and `auditors` groups carry their admin grants by themselves (no test grants them
by hand): operators reach every page they tune and none of user/group/permission management;
auditors read host events only; a `flush` (what every `transactional_db` test ends with) leaves both
groups with their grants."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.test import Client

from apps.facets.services import facet_ensure
from apps.tenants.staff_roles import STAFF_ROLES

OPERATOR_CAN = (
    "/admin/facets/facet/",
    "/admin/facets/facet/a2a/change/",
    "/admin/facets/facetchange/",
    "/admin/agents/agent/",
    "/admin/agents/workflow/",
    "/admin/a2a/skillroute/",
    "/admin/a2a/skillroute/add/",
    "/admin/tenants/tenant/",
    "/admin/tenants/tenant/add/",
    "/admin/tenants/apikey/",
    "/admin/tenants/apikey/add/",
    "/admin/console/tenantmembership/",
    "/admin/console/tenantmembership/add/",
    "/admin/runs/run/",
    "/admin/push/delivery/",
    "/admin/push/deadletter/",
    "/admin/push/pushconfig/",
    "/admin/push/webhook/",
    "/admin/peers/peercredential/",
)
OPERATOR_CANNOT = (
    "/admin/auth/user/",
    "/admin/auth/user/add/",
    "/admin/auth/group/",
    "/admin/auth/group/add/",
    "/admin/audit/hostevent/",
    "/admin/peers/peercredential/add/",
)


def _grants(name: str) -> set[tuple[str, str]]:
    group = Group.objects.get(name=name)
    return set(group.permissions.values_list("content_type__app_label", "codename"))


def _staff_client(group: str) -> Client:
    user = User.objects.create_user(f"{group}-member", password="pw-staff-roles", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_groups_hold_exactly_their_table_and_no_account_management() -> None:
    for name, grants in STAFF_ROLES.items():
        assert _grants(name) == set(grants), name  # every listed permission exists and is granted
    operators = _grants("operators")
    assert not {g for g in operators if g[0] in ("auth", "contenttypes", "sessions", "admin")}
    assert not {g for g in operators if g[1].startswith("delete_")}
    assert _grants("auditors") == {("audit", "view_hostevent")}


@pytest.mark.django_db
def test_an_operator_reaches_the_operator_admin_and_not_account_management() -> None:
    facet_ensure(protocol="a2a")
    client = _staff_client("operators")
    for path in OPERATOR_CAN:
        assert client.get(path).status_code == 200, path
    for path in OPERATOR_CANNOT:
        assert client.get(path).status_code == 403, path
    index = client.get("/admin/").content.decode()
    assert "/admin/facets/facet/" in index and "/admin/auth/user/" not in index


@pytest.mark.django_db
def test_an_auditor_reads_host_events_only() -> None:
    client = _staff_client("auditors")
    assert client.get("/admin/audit/hostevent/").status_code == 200
    for path in ("/admin/facets/facet/", "/admin/tenants/apikey/", "/admin/auth/user/", "/admin/push/delivery/"):
        assert client.get(path).status_code == 403, path


@pytest.mark.django_db(transaction=True)
def test_a_flush_leaves_both_groups_with_their_grants() -> None:
    call_command("flush", interactive=False, verbosity=0)
    for name, grants in STAFF_ROLES.items():
        assert _grants(name) == set(grants), name
