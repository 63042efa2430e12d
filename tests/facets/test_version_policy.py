"""Version policy per tenant and agent (issue 24; apps/facets/policy.py).

Over a live server: two tenants, one with a stricter MCP floor, the same exchange accepted for one
and refused for the other, each with its `negotiation.decided` record; a policy change is seen by
the live server's next request (its per-process cache emptied by the table's trigger). In process:
the rules (never looser than the host floor, an agent's never looser than its tenant's) through the
service and the admin, and an agent's floor on A2A: refused below it, and its card lists only the
versions it accepts.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.utils import timezone

from apps.agents.models import Agent
from apps.agents.routing_values import a2a_tenant_of
from apps.agents.services import agent_create
from apps.audit.models import HostEvent
from apps.core.errors import ValidationFailed
from apps.core.invalidation import CHANNEL, listener_application_name
from apps.facets.models import VersionPolicy, VersionPolicyChange
from apps.facets.negotiation import NEGOTIATION_EVENT
from apps.facets.servable import register_servable_versions, servable_versions, unregister_servable_versions
from apps.facets.services import facet_ensure, facet_update, version_policy_clear, version_policy_set
from apps.tenants.models import Tenant
from apps.tenants.services import tenant_get_or_create
from tests.a2a.conftest import Caller, acme, caller_for  # noqa: F401  (fixtures)
from tests.door_client import DoorClient
from tests.live import wait_until

OLD, NEW = "2025-11-25", "2026-07-28"


def _offer_mcp(floor: str = OLD) -> None:
    facet_update(
        protocol="mcp",
        changes={"versions": [NEW, OLD], "preferred_version": NEW, "minimum_version": floor},
        actor="test",
    )


def _negotiations(tenant: str) -> list[dict[str, Any]]:
    events = HostEvent.unscoped_all_tenants.filter(type=NEGOTIATION_EVENT, subject__tenant=tenant)
    return [e.payload for e in events.order_by("sequence")]


# ---------------------------------------------------------------------------------------------
# Over a live server


def _initialize(url: str, key: str, version: str = OLD) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }
    return httpx.post(f"{url}/mcp", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _accepted(response: httpx.Response) -> bool:
    if response.status_code == 200 and response.json().get("result", {}).get("protocolVersion") == OLD:
        return True
    assert response.status_code == 400 and response.json()["error"]["message"] == "Unsupported protocol version", (
        response.text
    )
    return False


def _server_listening() -> bool:
    """Another process of this test database (the live server) holds its LISTEN."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name LIKE 'openwop-invalidation:%%' AND application_name <> %s AND state = 'idle' "
            "AND (query ILIKE %s OR query = 'SELECT 1')",
            [listener_application_name(), f"LISTEN {CHANNEL}"],
        )
        return int(cursor.fetchone()[0]) >= 1


@contextmanager
def _policy_trigger_disabled() -> Iterator[None]:
    """The policy table's invalidation trigger off: its writes reach no cache (the control)."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE facets_versionpolicy DISABLE TRIGGER facets_versionpolicy_invalidate")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE facets_versionpolicy ENABLE TRIGGER facets_versionpolicy_invalidate")


@pytest.mark.django_db(transaction=True)
def test_the_same_mcp_exchange_is_accepted_for_one_tenant_and_refused_for_the_stricter(
    live_url: str, make_key: Any
) -> None:
    _offer_mcp()
    keys = {"acme": make_key("acme"), "globex": make_key("globex")}
    globex = Tenant.objects.get(slug="globex")
    version_policy_set(tenant=globex, agent=None, protocol="mcp", minimum=NEW, actor="test")

    assert _accepted(_initialize(live_url, keys["acme"])) is True
    assert _accepted(_initialize(live_url, keys["globex"])) is False  # no handshake revision at its floor

    acme_record, globex_record = _negotiations("acme")[-1], _negotiations("globex")[-1]
    assert {k: acme_record[k] for k in ("outcome", "reason", "floor", "requested", "version")} == {
        "outcome": "accepted",
        "reason": "ok",
        "floor": OLD,
        "requested": OLD,
        "version": OLD,
    }
    assert {k: globex_record[k] for k in ("outcome", "reason", "floor", "requested")} == {
        "outcome": "refused",
        "reason": "below-floor",
        "floor": NEW,
        "requested": OLD,
    }
    assert "version" not in globex_record
    assert len(_negotiations("globex")) == 1  # one exchange, one record


@pytest.mark.django_db(transaction=True)
def test_a_policy_change_is_seen_by_the_live_servers_next_request(live_url: str, make_key: Any) -> None:
    _offer_mcp()
    key = make_key("globex")
    globex = Tenant.objects.get(slug="globex")
    version_policy_set(tenant=globex, agent=None, protocol="mcp", minimum=NEW, actor="test")
    assert _accepted(_initialize(live_url, key)) is False  # starts the server's listener, if not yet
    wait_until(_server_listening, "the live server's invalidation listener", timeout=30)
    assert _accepted(_initialize(live_url, key)) is False  # now cached there

    # The control: the server decides from its cached policy, so a change nobody announces is unseen.
    with _policy_trigger_disabled():
        VersionPolicy.objects.filter(tenant=globex).update(minimum_version="")
    assert _accepted(_initialize(live_url, key)) is False, "the server did not answer from its cache"

    version_policy_clear(tenant=globex, agent=None, protocol="mcp", actor="test")  # announced
    assert _accepted(_initialize(live_url, key)) is True
    version_policy_set(tenant=globex, agent=None, protocol="mcp", minimum=NEW, actor="test")
    assert _accepted(_initialize(live_url, key)) is False
    assert [r["outcome"] for r in _negotiations("globex")] == ["refused"] * 3 + ["accepted", "refused"]


# ---------------------------------------------------------------------------------------------
# The rules


@pytest.fixture
def tenants(db: None) -> tuple[Tenant, Tenant]:
    return tenant_get_or_create(slug="acme")[0], tenant_get_or_create(slug="globex")[0]


def _agent(tenant: Tenant, agent_id: str = "helper") -> Agent:
    return agent_create(
        tenant=tenant,
        actor="test",
        agent_id=agent_id,
        persona=agent_id.title(),
        roster=["conformance-noop"],
        published=True,
    )


def test_a_tenant_floor_looser_than_the_host_is_refused_by_name(tenants: tuple[Tenant, Tenant]) -> None:
    acme_t, _ = tenants
    _offer_mcp(floor=NEW)
    with pytest.raises(ValidationFailed) as refused:
        version_policy_set(tenant=acme_t, agent=None, protocol="mcp", minimum=OLD, actor="test")
    assert refused.value.message == (
        "The tenant floor 2025-11-25 is looser than the host floor 2026-07-28 (mcp minimumRevision)."
    )
    assert not VersionPolicy.objects.exists() and not VersionPolicyChange.objects.exists()


def test_an_agent_floor_looser_than_its_tenant_is_refused(tenants: tuple[Tenant, Tenant]) -> None:
    acme_t, _ = tenants
    _offer_mcp()
    helper = _agent(acme_t)
    version_policy_set(tenant=acme_t, agent=None, protocol="mcp", minimum=NEW, actor="test")
    with pytest.raises(ValidationFailed) as refused:
        version_policy_set(tenant=acme_t, agent=helper, protocol="mcp", minimum=OLD, actor="test")
    assert refused.value.message == (
        "The agent floor 2025-11-25 is looser than the tenant floor 2026-07-28 (mcp minimumRevision)."
    )
    assert VersionPolicy.objects.filter(agent=helper).count() == 0
    version_policy_set(tenant=acme_t, agent=helper, protocol="mcp", minimum=NEW, actor="test")  # equal is fine
    assert VersionPolicy.objects.get(agent=helper).minimum_version == NEW


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"minimum": "2026-13-01"}, "The tenant floor '2026-13-01' is not a valid MCP revision"),
        ({"minimum": "2027-01-01"}, "is above the host's preferred revision 2026-07-28"),
        (
            {"minimum": "", "scheduled_minimum": "2024-11-05", "scheduled_at": "future"},
            "The scheduled tenant floor 2024-11-05 is looser than the host floor 2025-11-25 (mcp minimumRevision).",
        ),
        ({"minimum": "", "scheduled_minimum": NEW, "scheduled_at": "past"}, "is not in the future"),
        ({"minimum": "", "scheduled_minimum": NEW}, "needs both a version and the date"),
    ],
)
def test_every_rule_refuses_with_its_message(
    tenants: tuple[Tenant, Tenant], changes: dict[str, str], message: str
) -> None:
    acme_t, _ = tenants
    _offer_mcp()
    at = changes.pop("scheduled_at", None)
    when = {"future": timezone.now() + dt.timedelta(days=3), "past": timezone.now() - dt.timedelta(days=1)}
    with pytest.raises(ValidationFailed) as refused:
        version_policy_set(
            tenant=acme_t, agent=None, protocol="mcp", actor="test", scheduled_at=when.get(at or ""), **changes
        )
    assert message in refused.value.message
    assert not VersionPolicy.objects.exists()


def test_another_tenants_agent_is_refused(tenants: tuple[Tenant, Tenant]) -> None:
    acme_t, globex_t = tenants
    globex_agent = _agent(globex_t)
    with pytest.raises(ValidationFailed, match="is not an agent of tenant acme"):
        version_policy_set(tenant=acme_t, agent=globex_agent, protocol="a2a", minimum="1.0", actor="test")


def test_set_and_clear_are_audited_with_before_and_after(tenants: tuple[Tenant, Tenant]) -> None:
    acme_t, _ = tenants
    _offer_mcp()
    helper = _agent(acme_t)
    version_policy_set(tenant=acme_t, agent=helper, protocol="mcp", minimum=NEW, actor="ops")
    version_policy_set(tenant=acme_t, agent=helper, protocol="mcp", minimum=NEW, actor="ops")  # unchanged: no row
    assert version_policy_clear(tenant=acme_t, agent=helper, protocol="mcp", actor="ops") is True
    assert version_policy_clear(tenant=acme_t, agent=helper, protocol="mcp", actor="ops") is False
    changes = list(VersionPolicyChange.objects.order_by("id"))
    assert [(c.tenant_slug, c.agent_id, c.protocol, c.actor) for c in changes] == [("acme", "helper", "mcp", "ops")] * 2
    assert changes[0].before is None and changes[0].after["minimum_version"] == NEW
    assert changes[1].before["minimum_version"] == NEW and changes[1].after["minimum_version"] == ""
    from django.db import DatabaseError, transaction

    with pytest.raises(DatabaseError), transaction.atomic():  # the audit is append-only in the database too
        VersionPolicyChange.objects.filter(pk=changes[0].pk).update(actor="someone else")


def test_the_admin_shows_the_rule_on_the_form_and_audits_a_save(tenants: tuple[Tenant, Tenant], client: Client) -> None:
    acme_t, _ = tenants
    _offer_mcp(floor=NEW)
    client.force_login(get_user_model().objects.create_superuser("op", "op@example.test", "x"))
    form = {
        "tenant": str(acme_t.pk),
        "agent": "",
        "protocol": "mcp",
        "minimum_version": OLD,
        "scheduled_minimum_version": "",
        "scheduled_at_0": "",
        "scheduled_at_1": "",
    }
    refused = client.post("/admin/facets/versionpolicy/add/", form)
    assert refused.status_code == 200
    assert "The tenant floor 2025-11-25 is looser than the host floor 2026-07-28 (mcp minimumRevision)." in (
        refused.content.decode()
    )
    assert not VersionPolicy.objects.exists()

    saved = client.post("/admin/facets/versionpolicy/add/", {**form, "minimum_version": NEW})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    policy = VersionPolicy.objects.get()
    assert (policy.tenant_id, policy.agent_id, policy.minimum_version) == (acme_t.pk, None, NEW)
    change = VersionPolicyChange.objects.get()
    assert change.actor == "admin:op" and change.before is None and change.after["minimum_version"] == NEW

    deleted = client.post(f"/admin/facets/versionpolicy/{policy.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302 and not VersionPolicy.objects.exists()
    assert VersionPolicyChange.objects.order_by("-id").first().after["minimum_version"] == ""  # type: ignore[union-attr]
    assert client.get("/admin/facets/versionpolicychange/").status_code == 200
    assert client.get(f"/admin/facets/versionpolicychange/{change.pk}/delete/").status_code == 403


# ---------------------------------------------------------------------------------------------
# An agent's floor on A2A


@pytest.fixture
def two_a2a_versions(db: None) -> Iterator[None]:
    """The a2a facet offering 0.9 and 1.0 (0.9 made servable for the test), floor 0.9."""
    added = {"0.9"} - servable_versions("a2a")
    register_servable_versions("a2a", added)
    try:
        facet_ensure(protocol="a2a")
        facet_update(protocol="a2a", changes={"versions": ["1.0", "0.9"], "minimum_version": "0.9"}, actor="test")
        yield
    finally:
        unregister_servable_versions("a2a", added)


def _rpc_result(response: Any) -> dict[str, Any]:
    body = response.json()
    assert "result" in body, body
    return body["result"]


def test_an_agents_card_lists_only_the_versions_it_accepts_and_it_refuses_below(
    acme: Caller,  # noqa: F811
    two_a2a_versions: None,
) -> None:
    acme_t = Tenant.objects.get(slug="acme")
    helper, other = _agent(acme_t), _agent(acme_t, "other")
    r_helper, r_other = a2a_tenant_of(agent=helper), a2a_tenant_of(agent=other)
    version_policy_set(tenant=acme_t, agent=helper, protocol="a2a", minimum="1.0", actor="test")

    public = DoorClient().get("/.well-known/agent-card.json").json()
    assert {i["protocolVersion"] for i in public["supportedInterfaces"]} == {"1.0", "0.9"}  # unchanged
    card = _rpc_result(acme.rpc("GetExtendedAgentCard", {"tenant": r_helper}))
    assert card["supportedInterfaces"] and {i["protocolVersion"] for i in card["supportedInterfaces"]} == {"1.0"}
    other_card = _rpc_result(acme.rpc("GetExtendedAgentCard", {"tenant": r_other}))
    assert {i["protocolVersion"] for i in other_card["supportedInterfaces"]} == {"1.0", "0.9"}

    before = len(_negotiations("acme"))
    refused = acme.rpc("GetExtendedAgentCard", {"tenant": r_helper}, **{"A2A-Version": "0.9"})
    assert refused.json()["error"]["code"] == -32009, refused.json()
    records = _negotiations("acme")[before:]
    # One exchange, one decision, one record: R was resolved before negotiating, so the agent's
    # floor is the record's floor.
    assert [(r["outcome"], r["reason"], r["floor"]) for r in records] == [("refused", "below-floor", "1.0")]
    assert records[0]["requested"] == "0.9" and "version" not in records[0]
    # HTTP+JSON names R in the path: the same one record.
    rest = acme.rest_get(f"/{r_helper}/extendedAgentCard", **{"A2A-Version": "0.9"})
    assert rest.status_code == 400, rest.content
    assert [(r["outcome"], r["floor"]) for r in _negotiations("acme")[before + 1 :]] == [("refused", "1.0")]
    # The same version to the other agent, and to the host card, is accepted.
    assert "result" in acme.rpc("GetExtendedAgentCard", {"tenant": r_other}, **{"A2A-Version": "0.9"}).json()
    assert "result" in acme.rpc("GetExtendedAgentCard", {}, **{"A2A-Version": "0.9"}).json()
