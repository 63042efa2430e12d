"""The three roles as real accounts on the committed test database (browser and permission tests)."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import Group, User

from apps.console.models import TenantMembership
from apps.console.services import membership_create
from apps.tenants.services import tenant_get_or_create

PASSWORD = "correct-horse-battery-42"


@dataclass(frozen=True)
class Account:
    username: str
    password: str = PASSWORD


def operator() -> Account:
    """Staff in `operators`: the group's own grants (apps/tenants/staff_roles.py), nothing added here."""
    user = User.objects.create_user("olga-operator", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name="operators"))
    return Account(user.username)


def auditor() -> Account:
    """Staff in `auditors`: the negotiation page and host events, nothing else."""
    user = User.objects.create_user("arno-auditor", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name="auditors"))
    return Account(user.username)


def tenant_user(slug: str = "acme", username: str = "tina-tenant") -> Account:
    tenant = tenant_get_or_create(slug=slug)[0]
    membership: TenantMembership = membership_create(tenant=tenant, username=username, password=PASSWORD)
    return Account(membership.user.username)


def admin_login(page, base_url: str, account: Account, next_path: str = "/admin/") -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{base_url}/admin/login/?next={next_path}")
    page.get_by_label("Username").fill(account.username)
    page.get_by_label("Password").fill(account.password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base_url}{next_path}*")


def console_login(page, base_url: str, account: Account) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{base_url}/console/login/")
    page.get_by_label("Username").fill(account.username)
    page.get_by_label("Password").fill(account.password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base_url}/console/")  # the overview
