"""Console pages with content: agents with their card URLs, runs with a live-status stream, a
webhook's deliveries and dead letters; and the command operators use to create console users."""

from __future__ import annotations

import io

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from apps.a2a.services import card_key_activate, card_key_generate
from apps.agents.services import agent_create, agent_publish, workflow_fixtures_seed
from apps.console.models import TenantMembership
from apps.core import egress
from apps.facets.services import facet_ensure
from apps.push.models import Delivery, DeliveryAttempt, DeliveryStatus
from apps.push.services import webhook_register
from apps.runs.models import RunEvent
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from tests.browser.roles import PASSWORD, tenant_user
from tests.core.test_egress import FakeDns

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme_client(make_key) -> tuple[Client, object]:  # type: ignore[no-untyped-def]
    client = Client()
    assert client.login(username=tenant_user("acme").username, password=PASSWORD)
    tenant = Tenant.objects.get(slug="acme")
    workflow_fixtures_seed(tenant=tenant)
    return client, subject_from_api_key(make_key("acme"))


def test_agents_page_lists_card_urls(acme_client) -> None:  # type: ignore[no-untyped-def]
    client, _ = acme_client
    facet_ensure(protocol="a2a")
    tenant = Tenant.objects.get(slug="acme")
    agent = agent_create(tenant=tenant, actor="t", agent_id="helper", persona="Hal", roster=["conformance-noop"])
    assert b"helper" not in client.get("/console/agents/").content  # unpublished: not in the inventory
    agent_publish(agent=agent, actor="t")
    page = client.get("/console/agents/").content.decode()
    assert f"{settings.OPENWOP_PUBLIC_URL}/.well-known/agent-card.json" in page
    assert "/a2a/rest/" in page and "/extendedAgentCard" in page and "conformance-noop" in page


@pytest.mark.django_db(transaction=True)  # the key services commit durably
def test_agents_page_says_whether_cards_are_signed(acme_client) -> None:  # type: ignore[no-untyped-def]
    client, _ = acme_client
    facet_ensure(protocol="a2a")
    assert "Cards are not signed" in client.get("/console/agents/").content.decode()
    key = card_key_activate(key_pk=card_key_generate(algorithm="ES256", actor="t").pk, actor="t")
    page = client.get("/console/agents/").content.decode()
    assert "Cards are signed (JWS, ES256, key" in page and key.kid in page and "/.well-known/jwks.json" in page


def test_runs_page_streams_live_status(acme_client) -> None:  # type: ignore[no-untyped-def]
    client, subject = acme_client
    run = run_create(subject=subject, workflow_id="conformance-approval", inputs={}, transport="rest")
    page = client.get("/console/runs/").content.decode()
    assert run.run_id in page and f'data-status-stream="/console/runs/status/{run.run_id}"' in page


def test_webhook_page_shows_deliveries_attempts_and_dead_letters(acme_client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client, subject = acme_client
    fake = FakeDns()
    fake.set("hooks.example.com", ["93.184.216.34"])
    monkeypatch.setattr(egress, "resolve_host", fake)
    hook = webhook_register(subject=subject, url="https://hooks.example.com/in", events=["run.completed"])
    run = run_create(subject=subject, workflow_id="conformance-noop", inputs={}, transport="rest")
    event = RunEvent.objects.for_tenant(run.tenant_id).filter(run=run).first()
    now = timezone.now()
    dead = Delivery.objects.create(
        tenant_id=run.tenant_id,
        delivery_id="dead-one",
        kind="webhook",
        webhook=hook,
        run=run,
        event=event,
        event_type=event.type,
        body="{}",
        attempts=2,
        max_attempts=2,
        next_attempt_at=now,
        queue="q",
        status=DeliveryStatus.DEAD,
        settled_at=now,
        last_status_code=503,
    )
    for number in (1, 2):
        DeliveryAttempt.objects.create(tenant_id=run.tenant_id, delivery=dead, number=number, status_code=503, at=now)
    page = client.get(f"/console/push/webhooks/{hook.webhook_id}").content.decode()
    assert page.count("HTTP 503") == 2
    dead_letters = page[page.index('id="dead-letters"') :]
    assert "dead-one" in dead_letters and run.run_id in dead_letters


def test_console_member_create_command(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    Tenant.objects.create(slug="initech", name="Initech")
    monkeypatch.setenv("OPENWOP_CONSOLE_PASSWORD", "pw-from-env-123")
    out = io.StringIO()
    call_command("console_member_create", "--tenant", "initech", "--username", "peter", stdout=out)
    assert "peter" in out.getvalue()
    membership = TenantMembership.objects.select_related("user", "tenant").get(user__username="peter")
    assert membership.tenant.slug == "initech" and not membership.user.is_staff
    assert membership.user.check_password("pw-from-env-123")


class _Terminal:
    """What the command reads on a terminal: `isatty()`, and the answers typed at each prompt."""

    def __init__(self, monkeypatch, answers: list[str], *, tty: bool = True) -> None:  # type: ignore[no-untyped-def]
        self.prompts: list[str] = []
        typed = iter(answers)
        monkeypatch.delenv("OPENWOP_CONSOLE_PASSWORD", raising=False)
        monkeypatch.setattr("sys.stdin", io.StringIO(""))
        monkeypatch.setattr("sys.stdin.isatty", lambda: tty)

        def ask(prompt: str = "") -> str:
            self.prompts.append(prompt)
            return next(typed)

        monkeypatch.setattr("getpass.getpass", ask)


def test_console_member_create_asks_for_the_password_twice(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 53 item 6, like createsuperuser: typed twice; a mismatch or a blank one is said and asked again."""
    Tenant.objects.create(slug="initech", name="Initech")
    terminal = _Terminal(monkeypatch, ["first-try-123", "typo-try-123", "", "pw-typed-twice-1", "pw-typed-twice-1"])
    out, err = io.StringIO(), io.StringIO()
    call_command("console_member_create", "--tenant", "initech", "--username", "milton", stdout=out, stderr=err)
    assert terminal.prompts == ["Password: ", "Password (again): ", "Password: ", "Password: ", "Password (again): "]
    said = ["Error: Your passwords didn't match.", "Error: Blank passwords aren't allowed."]
    assert err.getvalue().splitlines() == said
    user = TenantMembership.objects.select_related("user").get(user__username="milton").user
    assert user.check_password("pw-typed-twice-1") and not user.check_password("first-try-123")


def test_console_member_create_gives_up_and_refuses_without_a_terminal(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    Tenant.objects.create(slug="initech", name="Initech")
    _Terminal(monkeypatch, ["a-password-123", "another-one-123"] * 3)
    with pytest.raises(CommandError, match="No password after 3 tries"):
        call_command("console_member_create", "--tenant", "initech", "--username", "bob", stderr=io.StringIO())
    _Terminal(monkeypatch, [], tty=False)
    with pytest.raises(CommandError, match="set OPENWOP_CONSOLE_PASSWORD"):
        call_command("console_member_create", "--tenant", "initech", "--username", "bob")
    assert not TenantMembership.objects.filter(user__username="bob").exists()
