"""The auditors' page at scale (issue 19 point 5): the list pages through every record with a
cursor (filters kept), and the charts read the daily rollup the database triggers keep as records
are inserted, by the ORM or by a multi-row INSERT, into either home of the record."""

from __future__ import annotations

import datetime as dt
import importlib
import re
from collections import Counter
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client

from apps.agents.services import workflow_fixtures_seed
from apps.audit.models import HostEvent, NegotiationDailyCount
from apps.audit.negotiations import (
    NegotiationFilters,
    negotiation_daily_query,
    negotiation_daily_totals,
    negotiation_page,
    negotiation_records,
)
from apps.facets.negotiation import NEGOTIATION_EVENT, negotiation_decide
from apps.runs.models import RunEvent
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.services import tenant_get_or_create

pytestmark = pytest.mark.django_db
URL = "/host/openwop-host/audit/negotiations"
DAY1 = dt.datetime(2026, 11, 30, 23, 59, 59, tzinfo=dt.UTC)
DAY2 = dt.datetime(2026, 12, 1, 0, 0, 0, tzinfo=dt.UTC)
ROLLUP_MIGRATION = importlib.import_module("apps.audit.migrations.0005_negotiation_daily_rollup_triggers")


def _payload(i: int, protocol: str = "a2a") -> dict[str, Any]:
    """Cycles through accepted, downgraded (version != requested), refused, and no requested version."""
    kind = i % 4
    if kind == 0:
        return {"protocol": protocol, "outcome": "accepted", "version": "1.0", "requested": "1.0", "reason": "ok"}
    if kind == 1:
        return {"protocol": protocol, "outcome": "accepted", "version": "1.0", "requested": "1.1", "reason": "ok"}
    if kind == 2:
        return {"protocol": protocol, "outcome": "refused", "requested": "0.3", "reason": "below-floor"}
    return {"protocol": protocol, "outcome": "accepted", "version": "1.0", "reason": "ok"}


def _host_records(
    tenant: Tenant,
    count: int,
    *,
    at: dt.datetime,
    subject: str = "bulk",
    start: int = 1,
    protocol: str = "a2a",
    step: dt.timedelta = dt.timedelta(0),
) -> None:
    """One multi-row INSERT (what the group-commit writer issues), plus one event of another type."""
    rows = [
        HostEvent(
            tenant=tenant,
            subject_id=subject,
            subject={"subjectId": subject},
            event_id=f"evt-{tenant.slug}-{subject}-{n:010d}",
            type=NEGOTIATION_EVENT,
            payload=_payload(n, protocol),
            durable=True,
            sequence=n,
            at=at - n * step,
        )
        for n in range(start, start + count)
    ]
    rows.append(
        HostEvent(
            tenant=tenant,
            subject_id=subject,
            subject={"subjectId": subject},
            event_id=f"evt-{tenant.slug}-{subject}-other-{start}",
            type="run.created",
            payload={"outcome": "accepted"},
            durable=True,
            sequence=start + count,
            at=at,
        )
    )
    HostEvent.unscoped_all_tenants.bulk_create(rows)


def _rollup() -> Counter[tuple[str, str, str, str, str]]:
    rows = NegotiationDailyCount.unscoped_all_tenants.values_list(
        "day", "tenant__slug", "protocol", "outcome", "requested", "count"
    )
    return Counter({(str(day), slug, p, o, r): n for day, slug, p, o, r, n in rows})


def _recount() -> Counter[tuple[str, str, str, str, str]]:
    """The rollup recomputed from the records themselves, the slow way."""
    counts: Counter[tuple[str, str, str, str, str]] = Counter()
    for r in negotiation_records(filters=NegotiationFilters()):
        counts[(str(r.at.astimezone(dt.UTC).date()), r.tenant, r.protocol, r.outcome_class, r.requested)] += 1
    return counts


def test_the_rollup_follows_every_insert_path(make_key: Any) -> None:
    acme, _ = tenant_get_or_create(slug="acme")
    globex, _ = tenant_get_or_create(slug="globex")
    _host_records(acme, 8, at=DAY1)
    _host_records(globex, 4, at=DAY2, protocol="mcp")
    # The ORM path of the door (one row per decision) and a decision made inside a run.
    subject = subject_from_api_key(make_key("acme"))
    negotiation_decide(protocol="a2a", requested="1.0", peer_origin="https://peer.example.net", subject=subject)
    workflow_fixtures_seed(tenant=acme)
    run = run_create(subject=subject, workflow_id="conformance-noop", inputs={}, transport="rest")
    negotiation_decide(
        protocol="a2a", requested="9.9", peer_origin="https://peer.example.net", subject=subject, run=run
    )
    last = RunEvent.unscoped_all_tenants.filter(run=run).order_by("-sequence").first()
    assert last is not None
    RunEvent.unscoped_all_tenants.bulk_create(
        [
            RunEvent(
                tenant=acme,
                run=run,
                sequence=last.sequence + n,
                event_id=f"bulk-run-{n}",
                type=NEGOTIATION_EVENT,
                payload=_payload(n),
                at=DAY2,
            )
            for n in range(1, 5)
        ]
        + [
            RunEvent(
                tenant=acme,
                run=run,
                sequence=last.sequence + 5,
                event_id="bulk-run-x",
                type="node.started",
                payload={"outcome": "refused"},
                at=DAY2,
            )
        ]
    )
    rollup = _rollup()
    assert rollup == _recount()
    assert sum(rollup.values()) == 8 + 4 + 1 + 1 + 4  # other event types never counted
    # DAY1 is 23:59:59 UTC: its records are on 2026-11-30, not the next day.
    assert rollup[("2026-11-30", "acme", "a2a", "accepted", "1.0")] == 2
    assert rollup[("2026-11-30", "acme", "a2a", "downgraded", "1.1")] == 2
    assert rollup[("2026-11-30", "acme", "a2a", "refused", "0.3")] == 2
    assert rollup[("2026-11-30", "acme", "a2a", "accepted", "")] == 2
    assert rollup[("2026-12-01", "globex", "mcp", "downgraded", "1.1")] == 1


def test_the_migration_backfills_records_written_before_it(tenant: Tenant) -> None:
    _host_records(tenant, 12, at=DAY1)
    before = _rollup()
    assert sum(before.values()) == 12
    NegotiationDailyCount.unscoped_all_tenants.all().delete()  # as before migration 0005 existed
    install = ROLLUP_MIGRATION.PG_INSTALL
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no pending FK checks under CREATE INDEX

        class Editor:  # the migration's statements, run as its RunPython runs them
            connection = cursor.db

            @staticmethod
            def execute(sql: str, params: Any = None) -> None:
                cursor.execute(sql)

        ROLLUP_MIGRATION._run(install)(None, Editor())
    assert _rollup() == before
    _host_records(tenant, 3, at=DAY1, start=100)  # and the reinstalled triggers keep counting
    assert sum(_rollup().values()) == 15


def test_the_charts_are_the_rollup_with_the_filters(make_key: Any) -> None:
    acme, _ = tenant_get_or_create(slug="acme")
    globex, _ = tenant_get_or_create(slug="globex")
    _host_records(acme, 8, at=DAY1)
    _host_records(globex, 8, at=DAY2, protocol="mcp")
    every = dict(negotiation_daily_totals(filters=NegotiationFilters()))
    assert every["a2a"] == [(DAY1.date(), {"accepted": 4, "downgraded": 2, "refused": 2})]
    assert every["mcp"] == [(DAY2.date(), {"accepted": 4, "downgraded": 2, "refused": 2})]
    # Cross-tenant: the tenant filter shows that tenant's records only.
    assert [p for p, _ in negotiation_daily_totals(filters=NegotiationFilters(tenant="globex"))] == ["mcp"]
    assert negotiation_daily_totals(filters=NegotiationFilters(tenant="initech")) == []
    only_downgraded = NegotiationFilters(protocol="a2a", outcome="downgraded")
    [(_, [(_, downgraded)])] = negotiation_daily_totals(filters=only_downgraded)
    assert downgraded == {"accepted": 0, "downgraded": 2, "refused": 0}
    assert negotiation_daily_totals(filters=NegotiationFilters(since=DAY2.date(), requested="0.3")) == [
        ("mcp", [(DAY2.date(), {"accepted": 0, "downgraded": 0, "refused": 2})])
    ]


def test_pages_cover_every_record_once_in_order_across_both_homes(make_key: Any) -> None:
    acme, _ = tenant_get_or_create(slug="acme")
    subject = subject_from_api_key(make_key("acme"))
    workflow_fixtures_seed(tenant=acme)
    run = run_create(subject=subject, workflow_id="conformance-noop", inputs={}, transport="rest")
    # Host events one second apart, and run events on the very same instants: ties across homes.
    _host_records(acme, 230, at=DAY2, step=dt.timedelta(seconds=1))
    first_free = RunEvent.unscoped_all_tenants.filter(run=run).count() + 1
    RunEvent.unscoped_all_tenants.bulk_create(
        RunEvent(
            tenant=acme,
            run=run,
            sequence=first_free + n,
            event_id=f"tie-{n}",
            type=NEGOTIATION_EVENT,
            payload=_payload(n),
            at=DAY2 - n * dt.timedelta(seconds=2),
        )
        for n in range(1, 40)
    )
    everything = list(negotiation_records(filters=NegotiationFilters()))
    assert len(everything) == 230 + 39
    seen, after, pages = [], None, 0
    while True:
        page, after = negotiation_page(filters=NegotiationFilters(), after=after, size=50)
        seen.extend(page)
        pages += 1
        if after is None:
            break
    assert pages == 6 and [r.position for r in seen] == [r.position for r in everything]
    assert [r.at for r in seen] == sorted((r.at for r in seen), reverse=True)
    refused = [r for r in everything if r.outcome_class == "refused"]
    page, after = negotiation_page(filters=NegotiationFilters(outcome="refused"), after=None, size=20)
    rest, _ = negotiation_page(filters=NegotiationFilters(outcome="refused"), after=after, size=1000)
    assert [r.position for r in page + rest] == [r.position for r in refused]
    assert negotiation_page(filters=NegotiationFilters(), after="not-a-cursor", size=5)[0] == everything[:5]


@pytest.fixture
def auditor_client(client: Client) -> Client:
    user = User.objects.create_user("aud", "aud@example.test", "x", is_staff=True)
    user.groups.add(Group.objects.get_or_create(name="auditors")[0])
    client.force_login(user)
    return client


def test_the_page_links_to_the_next_page_with_the_filters_kept(auditor_client: Client) -> None:
    acme, _ = tenant_get_or_create(slug="acme")
    globex, _ = tenant_get_or_create(slug="globex")
    _host_records(acme, 150, at=DAY1, step=dt.timedelta(seconds=1))
    _host_records(globex, 150, at=DAY1, step=dt.timedelta(seconds=1))
    first = auditor_client.get(URL, {"tenant": "acme"}).content.decode()
    assert first.count('class="neg-row"') == 100 and "globex" not in first.split('id="neg-records"')[1]
    [next_href] = set(re.findall(r'href="\?([^"]+)" rel="next"', first))
    assert "tenant=acme" in next_href and "after=" in next_href and "format=csv" not in next_href
    second = auditor_client.get(URL + "?" + next_href.replace("&amp;", "&")).content.decode()
    assert second.count('class="neg-row"') == 50 and 'rel="next"' not in second and 'rel="first"' in second
    assert "globex" not in second.split('id="neg-records"')[1]  # cross-tenant: the filter holds on every page
    # The chart covers all 150 of acme's records, not just the page shown.
    assert 'data-count="' in first
    counts = [int(n) for n in re.findall(r'data-count="(\d+)"', first)]
    assert sum(counts) == 150


def test_the_chart_query_reads_only_the_rollup_whatever_the_record_count(tenant: Tenant) -> None:
    # 20,000 records in one INSERT ... SELECT generate_series (the statement trigger groups them).
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO audit_hostevent (tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at)
            SELECT %s, 'gen', '{}'::jsonb, 'evt-gen-' || lpad(n::text, 12, '0'), 'negotiation.decided',
                   jsonb_build_object('protocol', 'a2a', 'version', '1.0', 'requested', '1.0',
                                      'outcome', CASE WHEN n %% 7 = 0 THEN 'refused' ELSE 'accepted' END),
                   true, n, %s::timestamptz - (n %% 30) * interval '1 day'
            FROM generate_series(1, 20000) AS n
            """,
            [tenant.pk, DAY2],
        )
        cursor.execute("ANALYZE audit_negotiationdailycount")
    assert NegotiationDailyCount.unscoped_all_tenants.count() == 60  # 30 days x 2 classes, not 20,000 rows
    totals = dict(negotiation_daily_totals(filters=NegotiationFilters()))
    assert sum(sum(c.values()) for _, c in totals["a2a"]) == 20000

    query = negotiation_daily_query(filters=NegotiationFilters(tenant="acme", protocol="a2a", since=DAY1.date()))
    plan = query.explain(format="json")
    scanned = set(re.findall(r'"Relation Name": "([a-z_]+)"', plan))
    print(f"chart query plan (relations scanned: {sorted(scanned)}):\n{plan}")
    assert scanned <= {"audit_negotiationdailycount", "tenants_tenant"}
    assert "audit_hostevent" not in plan and "runs_runevent" not in plan
