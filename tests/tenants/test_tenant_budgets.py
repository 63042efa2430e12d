"""Tenant budgets enforced by the services (issue 49 item 2; apps/tenants/budgets.py,
apps/runs/budgets.py): the resolver (override else host default, 0 = unlimited), runs_queued and
runs_per_minute in `run_create` (REST here, in process), api_keys in `api_key_create` (and through
`create_api_key`, the console and the admin), the `tenant_budget` command, the refusal counter.
A refusal writes nothing and never touches another tenant. The doors' wires: test_tenant_budgets_live.py."""

from __future__ import annotations

import subprocess
import sys
from io import StringIO
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.cache import caches
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from apps.agents.services import workflow_fixtures_seed
from apps.core.errors import RateLimited
from apps.core.metrics import BUDGET_REFUSALS, TENANT_BUDGET_REFUSALS
from apps.runs.models import IdempotencyRecord, Run, RunEvent
from apps.tenants.budgets import tenant_budget
from apps.tenants.models import ApiKey, Tenant, TenantBudget
from apps.tenants.services import api_key_create, tenant_budget_set, tenant_get_or_create
from tests.envelope import assert_envelope
from tests.live import ROOT

pytestmark = pytest.mark.django_db

DELAY = {"workflowId": "conformance-delay", "inputs": {"delayMs": 60_000}}  # stays queued: no worker here


def windows_forget() -> None:
    """The minute windows live in the shared cache, keyed by tenant pk (reused after a flush)."""
    location = settings.CACHES["default"].get("LOCATION")
    if str(settings.CACHES["default"]["BACKEND"]).endswith("RedisCache") and isinstance(location, str):
        client = redis.Redis.from_url(location)
        for name in client.scan_iter(match="*openwop:rl:tenant-runs:*"):
            client.delete(name)
    else:
        caches["default"].clear()


@pytest.fixture(autouse=True)
def _fresh_windows() -> None:
    windows_forget()


@pytest.fixture
def make_key(make_key):  # type: ignore[no-untyped-def]
    """The shared make_key, with the tenant's fixture workflows (seeded on commit otherwise)."""

    def _make(slug: str = "acme") -> str:
        raw = make_key(slug)
        workflow_fixtures_seed(tenant=Tenant.objects.get(slug=slug))
        return raw

    return _make


def _tenant(slug: str) -> Tenant:
    return tenant_get_or_create(slug=slug)[0]


def _post(key: str, body: dict[str, Any], **headers: str) -> Any:
    return Client().post(
        "/runs", data=body, content_type="application/json", headers={"Authorization": f"Bearer {key}", **headers}
    )


def _written(slug: str) -> tuple[int, int, int]:
    tenant = Tenant.objects.get(slug=slug)
    return (
        Run.objects.for_tenant(tenant).count(),
        RunEvent.objects.for_tenant(tenant).count(),
        IdempotencyRecord.objects.for_tenant(tenant).count(),
    )


def _refusals(budget: str) -> float:
    return BUDGET_REFUSALS.labels(budget)._value.get()


def test_the_resolver_takes_the_override_else_the_host_default(settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_TENANT_RUNS_QUEUED = 7
    settings.OPENWOP_TENANT_API_KEYS = 9
    acme = _tenant("acme")
    assert tenant_budget(acme.pk).runs_queued == 7
    TenantBudget.objects.create(tenant=acme, runs_queued=3, api_keys=0)
    budgets = tenant_budget(acme.pk)
    assert (budgets.runs_queued, budgets.api_keys, budgets.runs_per_minute) == (3, 0, 600)
    assert tenant_budget(_tenant("globex").pk).runs_queued == 7


def test_runs_queued_refuses_with_429_and_writes_nothing(make_key) -> None:  # type: ignore[no-untyped-def]
    key, other = make_key("acme"), make_key("globex")
    TenantBudget.objects.create(tenant=Tenant.objects.get(slug="acme"), runs_queued=2)
    assert _post(key, DELAY).status_code == 201
    assert _post(key, DELAY).status_code == 201
    before, refusals = _written("acme"), _refusals("runs_queued")

    refused = _post(key, DELAY)
    body = assert_envelope(refused, "rate_limited", 429)
    assert body["details"] == {"budget": "runs_queued", "limit": 2}
    assert int(refused["Retry-After"]) >= 1
    # Under an Idempotency-Key too: no run, no event, no idempotency record left behind.
    assert_envelope(_post(key, DELAY, **{"Idempotency-Key": "k-1"}), "rate_limited", 429)
    assert _written("acme") == before
    assert _refusals("runs_queued") == refusals + 2

    # Another tenant is unaffected (cross-tenant case).
    assert _post(other, DELAY).status_code == 201
    assert _post(other, DELAY).status_code == 201
    assert _post(other, DELAY).status_code == 201


def test_finished_and_parked_runs_are_not_queued(make_key) -> None:  # type: ignore[no-untyped-def]
    key = make_key("acme")
    TenantBudget.objects.create(tenant=Tenant.objects.get(slug="acme"), runs_queued=1)
    assert _post(key, {"workflowId": "echo", "inputs": {}}).status_code == 201  # pending (no worker)
    assert_envelope(_post(key, DELAY), "rate_limited", 429)
    run = Run.objects.for_tenant(Tenant.objects.get(slug="acme")).get()
    from datetime import timedelta

    from django.utils import timezone

    Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk).update(wake_at=timezone.now() + timedelta(hours=1))
    assert _post(key, DELAY).status_code == 201  # the parked one holds no slot


def test_runs_per_minute_refuses_past_the_window(make_key) -> None:  # type: ignore[no-untyped-def]
    key, other = make_key("acme"), make_key("globex")
    TenantBudget.objects.create(tenant=Tenant.objects.get(slug="acme"), runs_per_minute=2)
    TenantBudget.objects.create(tenant=Tenant.objects.get(slug="globex"), runs_per_minute=2)
    echo = {"workflowId": "echo", "inputs": {}}
    assert [_post(key, echo).status_code for _ in range(2)] == [201, 201]
    before = _written("acme")
    refused = _post(key, echo)
    assert assert_envelope(refused, "rate_limited", 429)["details"] == {"budget": "runs_per_minute", "limit": 2}
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert _written("acme") == before
    assert _post(other, echo).status_code == 201  # its own window


def test_zero_is_unlimited(make_key, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_TENANT_RUNS_QUEUED = 1
    settings.OPENWOP_TENANT_RUNS_PER_MINUTE = 1
    key = make_key("acme")
    TenantBudget.objects.create(tenant=Tenant.objects.get(slug="acme"), runs_queued=0, runs_per_minute=0)
    assert [_post(key, DELAY).status_code for _ in range(4)] == [201] * 4
    # Back to the host default of 1 each: refused.
    TenantBudget.objects.filter(tenant__slug="acme").delete()
    assert_envelope(_post(key, DELAY), "rate_limited", 429)


def test_api_keys_budget_refuses_the_service_and_create_api_key(settings) -> None:  # type: ignore[no-untyped-def]
    acme = _tenant("acme")
    tenant_budget_set(tenant=acme, values={"api_keys": 2})
    first, _ = api_key_create(tenant=acme)
    api_key_create(tenant=acme)
    with pytest.raises(RateLimited) as refused:
        api_key_create(tenant=acme)
    assert refused.value.details == {"budget": "api_keys", "limit": 2}
    assert ApiKey.objects.for_tenant(acme).count() == 2

    err = StringIO()
    with pytest.raises(CommandError) as command:
        call_command("create_api_key", "--tenant", "acme", stderr=err)
    assert command.value.returncode == 2 and "api keys budget (2)" in str(command.value)
    assert ApiKey.objects.for_tenant(acme).count() == 2

    # A revoked key frees its slot; another tenant has its own budget.
    from apps.tenants.services import api_key_revoke

    api_key_revoke(api_key=first)
    api_key_create(tenant=acme)
    settings.OPENWOP_TENANT_API_KEYS = 1
    globex = _tenant("globex")
    api_key_create(tenant=globex)
    with pytest.raises(RateLimited):
        api_key_create(tenant=globex)


def test_the_admin_refuses_a_key_past_the_budget_as_a_form_error(admin_client) -> None:  # type: ignore[no-untyped-def]
    acme = _tenant("acme")
    tenant_budget_set(tenant=acme, values={"api_keys": 1})
    api_key_create(tenant=acme)
    response = admin_client.post("/admin/tenants/apikey/add/", {"tenant": acme.pk, "kind": "user", "label": "x"})
    assert response.status_code == 200  # the form again, with the error; no 500
    assert b"api keys budget (1)" in response.content
    assert ApiKey.objects.for_tenant(acme).count() == 1


def test_the_admin_shows_the_budget_inline_with_the_host_default(admin_client) -> None:  # type: ignore[no-untyped-def]
    acme = _tenant("acme")
    page = admin_client.get(f"/admin/tenants/tenant/{acme.pk}/change/")
    assert page.status_code == 200
    assert b"OPENWOP_TENANT_RUNS_QUEUED" in page.content and b"the host default, 1000" in page.content


def _command(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("tenant_budget", *args, stdout=out)
    except CommandError as exc:
        return exc.returncode, str(exc)
    return 0, out.getvalue()


def test_the_command_sets_shows_and_clears(make_key) -> None:  # type: ignore[no-untyped-def]
    key = make_key("acme")
    every = ["--runs-queued", "1", "--requests-per-minute", "50", "--streams", "4", "--runs-in-progress", "2",
             "--api-keys", "3", "--runs-per-minute", "5"]  # fmt: skip
    code, out = _command("set", "--tenant", "acme", *every)
    assert code == 0
    assert "runs_queued\t1\ttenant" in out and "streams\t4\ttenant" in out
    row = TenantBudget.objects.get(tenant__slug="acme")
    assert (row.runs_queued, row.requests_per_minute, row.streams, row.runs_in_progress, row.api_keys,
            row.runs_per_minute) == (1, 50, 4, 2, 3, 5)  # fmt: skip
    assert _post(key, DELAY).status_code == 201
    assert_envelope(_post(key, DELAY), "rate_limited", 429)

    code, out = _command("set", "--tenant", "acme", "--runs-queued", "default")
    assert code == 0 and "runs_queued\t1000\tOPENWOP_TENANT_RUNS_QUEUED" in out
    assert _post(key, DELAY).status_code == 201
    code, out = _command("clear", "--tenant", "acme")
    assert code == 0 and not TenantBudget.objects.filter(tenant__slug="acme").exists()
    assert "api_keys\t100\tOPENWOP_TENANT_API_KEYS" in _command("show", "--tenant", "acme")[1]


@pytest.mark.parametrize(
    "args",
    [
        ("set", "--tenant", "nope", "--runs-queued", "1"),
        ("show", "--tenant", "nope"),
        ("set", "--tenant", "acme", "--runs-queued", "-1"),
        ("set", "--tenant", "acme", "--api-keys", "many"),
        ("set", "--tenant", "acme"),
    ],
)
def test_the_command_refuses_clearly(args: tuple[str, ...]) -> None:
    _tenant("acme")
    code, message = _command(*args)
    assert code == 2 and message
    assert not TenantBudget.objects.filter(tenant__slug="acme").exists()


def test_a_refused_command_has_no_traceback_on_the_shell() -> None:
    proc = subprocess.run(
        [sys.executable, "manage.py", "tenant_budget", "set", "--tenant", "acme", "--streams", "-3"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "CommandError" in proc.stderr


def test_refusals_are_counted_per_tenant(make_key) -> None:  # type: ignore[no-untyped-def]
    key = make_key("acme")
    TenantBudget.objects.create(tenant=Tenant.objects.get(slug="acme"), runs_queued=1)
    _post(key, DELAY)
    before = TENANT_BUDGET_REFUSALS.labels("acme", "runs_queued")._value.get()
    assert_envelope(_post(key, DELAY), "rate_limited", 429)
    assert TENANT_BUDGET_REFUSALS.labels("acme", "runs_queued")._value.get() == before + 1
    metrics = Client().get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert 'openwop_tenant_budget_refusals_total{budget="runs_queued",tenant="acme"}' in metrics
    assert 'openwop_budget_refusals_total{budget="runs_queued"}' in metrics


def test_the_console_refuses_a_key_past_the_budget_on_its_page() -> None:
    from tests.browser.roles import PASSWORD, tenant_user

    client = Client()
    assert client.login(username=tenant_user("acme").username, password=PASSWORD)
    acme = Tenant.objects.get(slug="acme")
    tenant_budget_set(tenant=acme, values={"api_keys": 1})
    assert client.post("/console/keys/", {"kind": "user", "label": "first"}).status_code == 302
    refused = client.post("/console/keys/", {"kind": "user", "label": "second"})
    assert refused.status_code == 429
    assert "api keys budget (1)" in refused.content.decode()
    assert ApiKey.objects.for_tenant(acme).count() == 1
