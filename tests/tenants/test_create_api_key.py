"""`manage.py create_api_key`: creates the tenant if missing, prints only the raw key on stdout."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from apps.tenants.models import ApiKey, Tenant
from apps.tenants.selectors import subject_from_api_key

pytestmark = pytest.mark.django_db
KEY_RE = re.compile(r"^owk_[0-9a-f]{12}\.[A-Za-z0-9_-]{40,}$")


def _run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_api_key", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_prints_only_the_key_and_creates_the_tenant() -> None:
    assert not Tenant.objects.filter(slug="newco").exists()
    out, _ = _run("--tenant", "newco")
    lines = out.splitlines()
    assert len(lines) == 1 and KEY_RE.match(lines[0]), out
    assert Tenant.objects.filter(slug="newco").exists()
    subject = subject_from_api_key(lines[0])
    assert subject.tenant == "newco" and subject.kind == "user"


def test_existing_tenant_and_agent_kind() -> None:
    _run("--tenant", "acme")
    out, err = _run("--tenant", "acme", "--kind", "agent")
    assert "created tenant" not in err
    assert subject_from_api_key(out.strip()).kind == "agent"
    assert ApiKey.unscoped_all_tenants.filter(tenant__slug="acme").count() == 2


def test_each_call_mints_a_distinct_key() -> None:
    assert _run("--tenant", "acme")[0] != _run("--tenant", "acme")[0]


def test_bad_slug_is_a_command_error() -> None:
    with pytest.raises(CommandError):
        _run("--tenant", "bad slug")
