"""`manage.py version_policy set|clear` and `facet_set --at`: success and refusal paths (issue 24)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.agents.services import agent_create
from apps.core.actors import os_user
from apps.facets.models import Facet, FacetChange, VersionPolicy, VersionPolicyChange
from apps.facets.services import facet_ensure, facet_update
from apps.tenants.models import Tenant
from apps.tenants.services import tenant_get_or_create
from tests.live import process_env

ROOT = Path(__file__).resolve().parents[2]
OLD, NEW = "2025-11-25", "2026-07-28"

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme() -> Tenant:
    facet_ensure(protocol="mcp")
    facet_update(protocol="mcp", changes={"versions": [NEW, OLD], "minimum_version": OLD}, actor="test")
    tenant = tenant_get_or_create(slug="acme")[0]
    agent_create(tenant=tenant, actor="test", agent_id="helper", persona="Helper", roster=[], published=True)
    return tenant


def _run(command: str, *args: str) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue().strip()


def test_set_then_clear_a_tenant_floor(acme: Tenant) -> None:
    out = _run("version_policy", "set", "--tenant", "acme", "--protocol", "mcp", "--minimum", NEW, "--actor", "ops")
    assert out == f"mcp floor of tenant acme: minimum {NEW}"
    assert VersionPolicy.objects.get(tenant=acme, agent=None).minimum_version == NEW
    out = _run("version_policy", "clear", "--tenant", "acme", "--protocol", "mcp", "--actor", "ops")
    assert out == "mcp floor of tenant acme: none of its own (the host floor applies)"
    assert not VersionPolicy.objects.exists()
    assert [(c.actor, c.after["minimum_version"]) for c in VersionPolicyChange.objects.order_by("id")] == [
        (f"cli:{os_user()} as ops", NEW),
        (f"cli:{os_user()} as ops", ""),
    ]


def test_an_agent_floor_and_a_scheduled_one(acme: Tenant) -> None:
    out = _run(
        "version_policy",
        "set",
        "--tenant",
        "acme",
        "--agent",
        "helper",
        "--protocol",
        "mcp",
        "--minimum",
        NEW,
        "--at",
        "2099-01-01T00:00:00",
    )
    assert out == (
        f"mcp floor of tenant acme, agent helper: minimum none of its own; minimum {NEW} from 2099-01-01T00:00:00+00:00"
    )
    policy = VersionPolicy.objects.get(agent__agent_id="helper")
    assert (policy.minimum_version, policy.scheduled_minimum_version) == ("", NEW)
    assert policy.scheduled_at is not None and policy.scheduled_at.year == 2099
    # Setting the floor in force keeps the schedule.
    _run("version_policy", "set", "--tenant", "acme", "--agent", "helper", "--protocol", "mcp", "--minimum", OLD)
    policy.refresh_from_db()
    assert (policy.minimum_version, policy.scheduled_minimum_version) == (OLD, NEW)
    assert VersionPolicyChange.objects.filter(agent_id="helper").count() == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["set", "--tenant", "acme", "--protocol", "mcp", "--minimum", "2024-11-05"],
            "The tenant floor 2024-11-05 is looser than the host floor 2025-11-25 (mcp minimumRevision).",
        ),
        (["set", "--tenant", "acme", "--protocol", "mcp", "--minimum", "soon"], "is not a valid MCP revision"),
        (
            ["set", "--tenant", "acme", "--protocol", "mcp", "--minimum", NEW, "--at", "2001-01-01"],
            "is not in the future",
        ),
        (
            ["set", "--tenant", "acme", "--protocol", "mcp", "--minimum", NEW, "--at", "next tuesday"],
            "is not an ISO 8601 datetime",
        ),
        (["set", "--tenant", "nobody", "--protocol", "mcp", "--minimum", NEW], "No tenant 'nobody'"),
        (
            ["set", "--tenant", "acme", "--agent", "ghost", "--protocol", "mcp", "--minimum", NEW],
            "No agent 'ghost' in tenant acme",
        ),
        (["set", "--tenant", "acme", "--protocol", "mcp"], "set needs --minimum"),
        (["clear", "--tenant", "acme", "--protocol", "mcp", "--minimum", NEW], "clear takes no --minimum"),
    ],
)
def test_a_refusal_says_why_exits_2_and_changes_nothing(acme: Tenant, args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as refused:
        _run("version_policy", *args)
    assert refused.value.returncode == 2 and message in str(refused.value)
    assert not VersionPolicy.objects.exists() and not VersionPolicyChange.objects.exists()


def test_an_agent_floor_looser_than_its_tenant_is_refused(acme: Tenant) -> None:
    _run("version_policy", "set", "--tenant", "acme", "--protocol", "mcp", "--minimum", NEW)
    with pytest.raises(CommandError) as refused:
        _run("version_policy", "set", "--tenant", "acme", "--agent", "helper", "--protocol", "mcp", "--minimum", OLD)
    assert refused.value.returncode == 2
    assert "The agent floor 2025-11-25 is looser than the tenant floor 2026-07-28 (mcp minimumRevision)." in str(
        refused.value
    )
    assert not VersionPolicy.objects.filter(agent__isnull=False).exists()


def test_facet_set_at_schedules_a_host_floor(acme: Tenant) -> None:
    out = _run("facet_set", "--protocol", "mcp", "--minimum", NEW, "--at", "2099-03-01T12:00:00Z", "--actor", "ops")
    assert out == (
        f"mcp: versions {NEW}, {OLD}; preferred {NEW}; minimum {OLD}; minimum {NEW} from 2099-03-01T12:00:00+00:00"
    )
    facet = Facet.objects.get(protocol="mcp")
    assert (facet.minimum_version, facet.scheduled_minimum_version) == (OLD, NEW)
    change = FacetChange.objects.filter(actor=f"cli:{os_user()} as ops").get()
    assert change.before["scheduled_at"] is None and change.after["scheduled_at"] == "2099-03-01T12:00:00+00:00"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--minimum", "2024-11-05", "--at", "2099-01-01"], "must be one of the offered revisions"),
        (["--minimum", NEW, "--at", "2001-01-01"], "is not in the future"),
        (["--preferred", NEW, "--at", "2099-01-01"], "give it with --minimum"),
    ],
)
def test_facet_set_at_refusals(acme: Tenant, args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as refused:
        _run("facet_set", "--protocol", "mcp", *args)
    assert refused.value.returncode == 2 and message in str(refused.value)
    facet = Facet.objects.get(protocol="mcp")
    assert (facet.scheduled_minimum_version, facet.scheduled_at) == ("", None)


@pytest.mark.django_db(transaction=True)  # the child process sees (and may write) the test database
def test_the_command_exits_with_status_2_from_a_shell(tmp_path: Path) -> None:
    facet_ensure(protocol="mcp")
    tenant_get_or_create(slug="acme")
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "version_policy",
            "set",
            "--tenant",
            "acme",
            "--protocol",
            "mcp",
            "--minimum",
            "2024-11-05",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=process_env("version-policy", tmp_path),
        cwd=str(ROOT),
    )
    assert done.returncode == 2, done.stderr
    assert "looser than the host floor 2026-07-28 (mcp minimumRevision)" in done.stderr
    assert "Traceback" not in done.stderr
    assert not VersionPolicy.objects.exists()
