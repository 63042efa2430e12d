"""One actor naming scheme for every change row (apps/core/actors.py): `admin:<username>` from the
admin, `cli:<os user>` from a management command with what `--actor` claimed beside it (never
instead of who ran it, whatever $USER and $LOGNAME say), `system:<job>` from the host itself."""

from __future__ import annotations

import os
import pwd
import shlex
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from apps.a2a.models import CardSigningKeyChange
from apps.agents.models import AgentChange
from apps.core.actors import ACTOR_MAX_LENGTH, cli_actor, os_user
from apps.facets.models import FacetChange, VersionPolicyChange
from apps.facets.services import facet_ensure
from apps.retention.models import RetentionChange, RetentionPolicy
from apps.tenants.services import tenant_get_or_create
from tests.admin.html_pages import form_fields
from tests.live import ROOT

pytestmark = pytest.mark.django_db(transaction=True)  # committed: the services' blocks are durable

OS_USER = pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture
def posing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment names someone else: what getpass.getuser() would have believed."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "mallory")


def _run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def _latest(model: Any, **filters: Any) -> str:
    row = model.objects.filter(**filters).exclude(actor__startswith="system:").order_by("-id").first()
    assert row is not None, model
    return str(row.actor)


def _commands() -> dict[str, tuple[list[str], Any]]:
    """Each command that takes --actor: its arguments for one change, and where the row lands."""
    return {
        "retention": (["retention", "set", "--tenant", "acme", "--runs-days", "3"], RetentionChange),
        "facet_set": (
            ["facet_set", "--protocol", "mcp", "--versions", "2026-07-28, 2025-11-25", "--minimum", "2025-11-25"],
            FacetChange,
        ),
        "version_policy": (
            ["version_policy", "set", "--tenant", "acme", "--protocol", "mcp", "--minimum", "2026-07-28"],
            VersionPolicyChange,
        ),
        "card_key": (["card_key", "generate", "--algorithm", "EdDSA"], CardSigningKeyChange),
    }


@pytest.fixture
def acme() -> None:
    tenant_get_or_create(slug="acme")
    facet_ensure(protocol="mcp")


@pytest.mark.parametrize("command", sorted(_commands()))
def test_a_command_records_who_ran_it_and_the_claim_beside_it(acme: None, posing: None, command: str) -> None:
    args, model = _commands()[command]
    _run(*args, "--actor", "alice (ticket 7)")
    assert _latest(model) == f"cli:{OS_USER} as alice (ticket 7)"  # not "alice", not mallory


@pytest.mark.parametrize("command", sorted(_commands()))
def test_without_a_claim_a_command_records_the_operating_system_user(acme: None, posing: None, command: str) -> None:
    args, model = _commands()[command]
    _run(*args)
    assert _latest(model) == f"cli:{OS_USER}"


@pytest.mark.parametrize("claim", ["two\nlines", "a\ttab", "bell\x07", "x" * ACTOR_MAX_LENGTH])
def test_a_claim_that_cannot_be_recorded_is_refused_and_nothing_changes(acme: None, claim: str) -> None:
    with pytest.raises(CommandError, match="--actor: ") as refused:
        _run("retention", "set", "--tenant", "acme", "--runs-days", "3", "--actor", claim)
    assert refused.value.returncode == 2
    assert not RetentionChange.objects.exists() and not RetentionPolicy.objects.exists()


def test_make_setup_signs_with_a_key_recorded_as_who_ran_it() -> None:
    """The Makefile's card_key line, as `make setup` runs it."""
    (line,) = [ln for ln in (ROOT / "Makefile").read_text().splitlines() if "manage.py card_key generate" in ln]
    words = shlex.split(line.split("manage.py", 1)[1].split(">", 1)[0])
    _run(*words)
    assert _latest(CardSigningKeyChange) == f"cli:{OS_USER} as make setup"


def test_the_cli_actor_fits_the_column_and_an_empty_claim_is_none() -> None:
    assert os_user() == OS_USER
    assert cli_actor("  ") == cli_actor(None) == f"cli:{OS_USER}"
    longest = "y" * (ACTOR_MAX_LENGTH - len(f"cli:{OS_USER} as "))
    assert len(cli_actor(longest)) == ACTOR_MAX_LENGTH


# ---- the admin and the host itself --------------------------------------------------------------


@pytest.fixture
def operator_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("opal", "opal@example.test", "pw"))
    return client


def _post_back(client: Client, url: str, form_id: str, **changes: str) -> int:
    data: dict[str, list[str]] = {}
    for name, value in form_fields(client.get(url).content.decode(), form_id):
        data.setdefault(name, []).append(value)
    data.update({name: [value] for name, value in changes.items()})
    return client.post(url, {**data, "_save": "Save"}).status_code


def test_the_admin_records_admin_and_the_username(acme: None, operator_client: Client) -> None:
    assert _post_back(operator_client, "/admin/facets/facet/mcp/change/", "facet_form", refresh_window_days="40") == 302
    assert _latest(FacetChange) == "admin:opal"
    tenant = tenant_get_or_create(slug="acme")[0]
    added = operator_client.post(
        "/admin/retention/retentionpolicy/add/",
        {"tenant": str(tenant.pk), "runs_days": "9", "records_days": "", "_save": "Save"},
    )
    assert added.status_code == 302, added.content[:500]
    assert _latest(RetentionChange) == "admin:opal"


def test_the_host_itself_records_system_and_the_job() -> None:
    tenant = tenant_get_or_create(slug="fresh-tenant")[0]  # its demo agent is seeded on creation
    assert list(AgentChange.objects.for_tenant(tenant).values_list("actor", flat=True)) == ["system:demo-seed"]
    facet_ensure(protocol="a2a")
    assert list(FacetChange.objects.filter(protocol="a2a").values_list("actor", flat=True)) == ["system:defaults"]
