"""The deprecation view (issue 24 item 3): the per-peer rollup the database's triggers keep on every
insert path, the reads over it (versions, drill-down, "what if", the console's `version_usage`),
the page, its CSV exports and who may see it; and that none of it reads the record tables."""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import importlib
import io
import re
from collections import Counter
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.agents.services import workflow_fixtures_seed
from apps.audit.deprecation import (
    PeerRow,
    TenantRow,
    VersionUsage,
    Window,
    version_peers,
    version_table,
    version_tenants,
    version_usage,
    what_if,
)
from apps.audit.models import HostEvent, NegotiationPeerDaily
from apps.audit.negotiations import NegotiationFilters, negotiation_records
from apps.core.async_db import async_pool_close
from apps.facets.negotiation import (
    NEGOTIATION_EVENT,
    Decision,
    negotiation_decide,
    negotiation_record_batched,
    peer_origin_digest,
)
from apps.runs.services import run_create
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.services import tenant_get_or_create
from tests.browser import roles

URL = "/host/openwop-host/deprecation/"
DRILL = "/host/openwop-host/deprecation/version/"
MIGRATION = importlib.import_module("apps.audit.migrations.0007_negotiation_peer_daily_triggers")
P1, P2, P3 = (peer_origin_digest(f"https://peer-{n}.example.net") for n in (1, 2, 3))
TODAY = dt.datetime.now(dt.UTC).date()
Key = tuple[str, str, str, str, str]


def _at(days_ago: int, *, hour: int = 12) -> dt.datetime:
    day = TODAY - dt.timedelta(days=days_ago)
    return dt.datetime(day.year, day.month, day.day, hour, tzinfo=dt.UTC)


def _seed(tenant: Tenant, rows: list[tuple[int, str, str | None, str, str | None]], *, subject: str = "seed") -> None:
    """(days ago, protocol, requested or None, outcome, peer digest or None) per record, in one
    multi-row INSERT (the shape of the group-commit writer's statement), plus one other event."""
    start = HostEvent.unscoped_all_tenants.filter(tenant=tenant, subject_id=subject).count() + 1
    events = []
    for n, (days_ago, protocol, requested, outcome, peer) in enumerate(rows, start=start):
        payload: dict[str, Any] = {"protocol": protocol, "outcome": outcome, "reason": "ok", "floor": ""}
        if requested is not None:
            payload["requested"] = requested
        if peer is not None:
            payload["peerDigest"] = peer
        if outcome == "accepted":
            payload["version"] = requested or "2025-03-26"
        events.append(
            HostEvent(
                tenant=tenant,
                subject_id=subject,
                subject={"subjectId": subject},
                event_id=f"evt-{tenant.slug}-{subject}-{n:08d}",
                type=NEGOTIATION_EVENT,
                payload=payload,
                durable=True,
                sequence=n,
                at=_at(days_ago),
            )
        )
    n = start + len(rows)
    events.append(
        HostEvent(
            tenant=tenant,
            subject_id=subject,
            subject={"subjectId": subject},
            event_id=f"evt-{tenant.slug}-{subject}-{n:08d}",
            type="run.created",
            payload={"protocol": "mcp", "requested": "2024-11-05", "outcome": "accepted", "peerDigest": P1},
            durable=True,
            sequence=n,
            at=_at(0),
        )
    )
    HostEvent.unscoped_all_tenants.bulk_create(events)


def _world() -> tuple[Tenant, Tenant]:
    """The records every read below is checked against (T = today, UTC):

    mcp 2024-11-05: acme P1 x3 at T-2 (one refused), acme P2 x1 at T-40 (refused, outside 30 days),
                    globex P1 x1 at T-10, globex (no peer digest) x1 at T-3.
    mcp 2025-03-26: acme P1 x2 at T-1, globex P3 x1 at T.
    mcp (none named): globex P3 x2 at T.
    a2a 0.3: acme P2 x2 at T-5, refused. a2a 1.0: acme P2 x1 at T-5.
    """
    acme, _ = tenant_get_or_create(slug="acme")
    globex, _ = tenant_get_or_create(slug="globex")
    _seed(
        acme,
        [
            (2, "mcp", "2024-11-05", "accepted", P1),
            (2, "mcp", "2024-11-05", "accepted", P1),
            (2, "mcp", "2024-11-05", "refused", P1),
            (40, "mcp", "2024-11-05", "refused", P2),
            (1, "mcp", "2025-03-26", "accepted", P1),
            (1, "mcp", "2025-03-26", "accepted", P1),
            (5, "a2a", "0.3", "refused", P2),
            (5, "a2a", "0.3", "refused", P2),
            (5, "a2a", "1.0", "accepted", P2),
        ],
    )
    _seed(
        globex,
        [
            (10, "mcp", "2024-11-05", "accepted", P1),
            (3, "mcp", "2024-11-05", "accepted", None),
            (0, "mcp", "2025-03-26", "accepted", P3),
            (0, "mcp", None, "accepted", P3),
            (0, "mcp", None, "accepted", P3),
        ],
    )
    return acme, globex


def _rollup() -> Counter[Key]:
    rows = NegotiationPeerDaily.unscoped_all_tenants.values_list(
        "day", "tenant__slug", "protocol", "requested", "peer_digest", "count", "accepted"
    )
    counts: Counter[Key] = Counter()
    for day, slug, protocol, requested, peer, n, accepted in rows:
        counts[(str(day), slug, protocol, requested, peer)] += n
        counts[(str(day), slug, protocol, requested, peer + "+accepted")] += accepted
    return +counts


def _recount() -> Counter[Key]:
    """The rollup recomputed the slow way, from the records themselves."""
    counts: Counter[Key] = Counter()
    for r in negotiation_records(filters=NegotiationFilters()):
        key = (str(r.at.astimezone(dt.UTC).date()), r.tenant, r.protocol, r.requested, r.peer_digest)
        counts[key] += 1
        if r.outcome_class != "refused":
            counts[(*key[:4], key[4] + "+accepted")] += 1
    return +counts


# --- the rollup -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_rollup_follows_the_orm_a_multi_row_insert_and_a_run(make_key: Any) -> None:
    acme, _ = _world()
    subject = subject_from_api_key(make_key("acme"))
    # The door's ORM path (one record per decision, a host event) and a decision inside a run.
    negotiation_decide(protocol="a2a", requested="1.0", peer_origin="https://peer-1.example.net", subject=subject)
    workflow_fixtures_seed(tenant=acme)
    run = run_create(subject=subject, workflow_id="conformance-noop", inputs={}, transport="rest")
    negotiation_decide(
        protocol="a2a", requested="0.1", peer_origin="https://peer-9.example.net", subject=subject, run=run
    )
    rollup = _rollup()
    assert rollup == _recount()
    today = str(TODAY)
    assert rollup[(today, "acme", "a2a", "1.0", P1)] == 1
    assert rollup[(today, "acme", "a2a", "1.0", P1 + "+accepted")] == 1
    p9 = peer_origin_digest("https://peer-9.example.net")
    assert rollup[(today, "acme", "a2a", "0.1", p9)] == 1  # from the run's log
    assert rollup[(today, "acme", "a2a", "0.1", p9 + "+accepted")] == 0  # below the 1.0 floor: refused
    two_days = str(TODAY - dt.timedelta(days=2))
    assert rollup[(two_days, "acme", "mcp", "2024-11-05", P1)] == 3
    assert rollup[(two_days, "acme", "mcp", "2024-11-05", P1 + "+accepted")] == 2
    assert rollup[(str(TODAY), "globex", "mcp", "", P3)] == 2  # no version named
    assert sum(n for k, n in rollup.items() if not k[4].endswith("+accepted")) == 9 + 5 + 2  # other types never
    # One row per (day, tenant, protocol, requested, peer), not per record.
    keys = [k for k in rollup if not k[4].endswith("+accepted")]
    assert NegotiationPeerDaily.unscoped_all_tenants.count() == len(keys)


@pytest.mark.django_db
def test_the_migration_backfills_records_written_before_it() -> None:
    _world()
    before = _rollup()
    NegotiationPeerDaily.unscoped_all_tenants.all().delete()  # as before migration 0007 existed
    install = MIGRATION.PG_INSTALL
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")

        class Editor:  # the migration's statements, run as its RunPython runs them
            connection = cursor.db

            @staticmethod
            def execute(sql: str, params: Any = None) -> None:
                cursor.execute(sql)

        MIGRATION._run(install)(None, Editor())
    assert _rollup() == before
    _seed(tenant_get_or_create(slug="acme")[0], [(0, "mcp", "2024-11-05", "accepted", P1)], subject="later")
    assert _rollup()[(str(TODAY), "acme", "mcp", "2024-11-05", P1)] == 1  # the reinstalled triggers count


@pytest.mark.django_db(transaction=True)
def test_the_group_commit_path_keeps_the_rollup(make_subject: Any) -> None:
    alice, bob = make_subject("acme")[1], make_subject("globex")[1]
    accepted = Decision(
        "mcp", "accepted", "ok", "2025-03-26", "2025-03-26", "2025-03-26", "2025-03-26", ("2025-03-26",)
    )
    refused = Decision("mcp", "refused", "below-floor", None, "2024-11-05", "2025-03-26", "2025-03-26", ("2025-03-26",))

    async def scenario() -> None:
        try:
            await asyncio.gather(
                *(
                    negotiation_record_batched(accepted, peer_origin="https://peer-1.example.net", subject=alice)
                    for _ in range(20)
                ),
                *(
                    negotiation_record_batched(refused, peer_origin="https://peer-2.example.net", subject=bob)
                    for _ in range(7)
                ),
                *(
                    negotiation_record_batched(refused, peer_origin="https://peer-1.example.net", subject=alice)
                    for _ in range(5)
                ),
            )
        finally:
            await async_pool_close()

    asyncio.run(scenario())
    connection.close()
    assert HostEvent.unscoped_all_tenants.filter(type=NEGOTIATION_EVENT).count() == 32
    rollup = _rollup()
    assert rollup == _recount()
    today = str(dt.datetime.now(dt.UTC).date())
    assert rollup[(today, "acme", "mcp", "2025-03-26", P1)] == 20
    assert rollup[(today, "acme", "mcp", "2024-11-05", P1)] == 5
    assert rollup[(today, "globex", "mcp", "2024-11-05", P2)] == 7
    assert rollup[(today, "globex", "mcp", "2024-11-05", P2 + "+accepted")] == 0


# --- the reads --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_versions_count_exchanges_tenants_and_distinct_peers_over_a_window() -> None:
    _world()
    last30 = Window.last_days(30)
    table = {(r.protocol, r.requested): r for r in version_table(window=last30)}
    old = table[("mcp", "2024-11-05")]
    assert (old.exchanges, old.accepted, old.refused, old.tenants, old.peers) == (5, 4, 1, 2, 1)  # no digest: no peer
    assert (old.first_seen, old.last_seen) == (TODAY - dt.timedelta(days=10), TODAY - dt.timedelta(days=2))
    new = table[("mcp", "2025-03-26")]
    assert (new.exchanges, new.tenants, new.peers, new.first_seen, new.last_seen) == (
        3,
        2,
        2,
        TODAY - dt.timedelta(days=1),
        TODAY,
    )
    assert (table[("mcp", "")].exchanges, table[("mcp", "")].peers) == (2, 1)
    assert (table[("a2a", "0.3")].exchanges, table[("a2a", "0.3")].accepted) == (2, 0)
    # Ordered: protocol, newest version first, "no version named" last.
    assert [(r.protocol, r.requested) for r in version_table(window=last30)] == [
        ("a2a", "1.0"),
        ("a2a", "0.3"),
        ("mcp", "2025-03-26"),
        ("mcp", "2024-11-05"),
        ("mcp", ""),
    ]
    # A wider window takes in acme's refused exchange from P2 40 days ago: a second peer.
    wide = {(r.protocol, r.requested): r for r in version_table(window=Window.last_days(41), protocol="mcp")}
    assert set(wide) == {("mcp", "2024-11-05"), ("mcp", "2025-03-26"), ("mcp", "")}
    old = wide[("mcp", "2024-11-05")]
    assert (old.exchanges, old.refused, old.peers, old.first_seen) == (6, 2, 2, TODAY - dt.timedelta(days=40))
    # A window of the single day T-2.
    day = Window(since=TODAY - dt.timedelta(days=2), until=TODAY - dt.timedelta(days=2))
    assert [(r.requested, r.exchanges, r.tenants) for r in version_table(window=day)] == [("2024-11-05", 3, 1)]
    assert version_table(window=Window(since=TODAY + dt.timedelta(days=1), until=TODAY + dt.timedelta(days=9))) == []


@pytest.mark.django_db
def test_drill_down_lists_tenants_and_peers() -> None:
    _world()
    last30 = Window.last_days(30)
    assert version_tenants(window=last30, protocol="mcp", requested="2024-11-05") == [
        TenantRow("acme", 3, 2, 1, TODAY - dt.timedelta(days=2), TODAY - dt.timedelta(days=2)),
        TenantRow("globex", 2, 2, 1, TODAY - dt.timedelta(days=10), TODAY - dt.timedelta(days=3)),
    ]
    assert version_peers(window=last30, protocol="mcp", requested="2024-11-05") == [
        PeerRow(P1, 2, 4, 3, TODAY - dt.timedelta(days=10), TODAY - dt.timedelta(days=2)),
    ]
    assert [t.tenant for t in version_tenants(window=last30, protocol="mcp", requested="")] == ["globex"]
    assert version_peers(window=Window.last_days(41), protocol="mcp", requested="2024-11-05")[1].peer_digest == P2


@pytest.mark.django_db
def test_what_if_counts_what_a_floor_would_have_refused() -> None:
    _world()
    outcome = what_if(protocol="mcp", floor="2025-03-26")
    assert outcome.versions == ("2024-11-05",)
    # The 40-day-old exchange is outside the last 30 days; the record without a digest is no peer.
    assert (outcome.exchanges, outcome.accepted, outcome.tenants, outcome.peers) == (5, 4, 2, 1)
    higher = what_if(protocol="mcp", floor="2025-06-18")
    assert higher.versions == ("2024-11-05", "2025-03-26")
    # Exchanges that named no version are served the preferred version: never counted.
    assert (higher.exchanges, higher.accepted, higher.tenants, higher.peers) == (8, 7, 2, 2)
    a2a = what_if(protocol="a2a", floor="1.0")
    assert (a2a.versions, a2a.exchanges, a2a.accepted, a2a.tenants, a2a.peers) == (("0.3",), 2, 0, 1, 1)
    nothing = what_if(protocol="mcp", floor="2024-01-01")
    assert (nothing.versions, nothing.exchanges, nothing.tenants, nothing.peers) == ((), 0, 0, 0)
    # `today` moves the window: 29 days on it starts today, after the last 2024-11-05 exchange (T-2).
    later = what_if(protocol="mcp", floor="2025-03-26", today=TODAY + dt.timedelta(days=29))
    assert (later.exchanges, later.tenants) == (0, 0)
    with pytest.raises(ValueError, match="not an MCP version"):
        what_if(protocol="mcp", floor="1.0")
    with pytest.raises(ValueError, match="not a protocol"):
        what_if(protocol="smtp", floor="1.0")


@pytest.mark.django_db
def test_version_usage_for_the_console_notice() -> None:
    _world()
    d = dt.timedelta
    assert version_usage(protocol="mcp", tenant_slug="acme", versions_below="2025-06-18") == [
        VersionUsage("2024-11-05", 3, 1, 1, TODAY - d(days=2), TODAY - d(days=2)),
        VersionUsage("2025-03-26", 2, 1, 1, TODAY - d(days=1), TODAY - d(days=1)),
    ]
    assert version_usage(protocol="mcp", tenant_slug=None, versions_below="2025-03-26") == [
        VersionUsage("2024-11-05", 5, 2, 1, TODAY - d(days=10), TODAY - d(days=2)),
    ]
    assert version_usage(protocol="mcp", tenant_slug="acme", versions_below="2025-03-26", days=41) == [
        VersionUsage("2024-11-05", 4, 1, 2, TODAY - d(days=40), TODAY - d(days=2)),
    ]
    assert version_usage(protocol="mcp", tenant_slug="globex", versions_below="2024-11-05") == []
    assert version_usage(protocol="a2a", tenant_slug="initech", versions_below="9.0") == []
    with pytest.raises(ValueError):
        version_usage(protocol="a2a", tenant_slug=None, versions_below="")


# --- the page ---------------------------------------------------------------------------------


@pytest.fixture
def auditor_client(client: Client) -> Client:
    account = roles.auditor()
    client.login(username=account.username, password=account.password)
    return client


def _csv(response: Any) -> list[dict[str, str]]:
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert re.match(r'attachment; filename="deprecation[-a-z0-9.]*-\d{8}T\d{6}Z\.csv"', response["Content-Disposition"])
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


@pytest.mark.django_db
def test_the_page_shows_the_table_and_links_each_version_to_its_drill_down(auditor_client: Client) -> None:
    _world()
    html = auditor_client.get(URL).content.decode()
    assert html.count('class="dep-row"') == 5
    row = html.split('data-requested="2024-11-05"')[1].split("</tr>")[0]
    assert re.findall(r'data-col="(\w+)">(\d+)<', row) == [
        ("exchanges", "5"),
        ("accepted", "4"),
        ("refused", "1"),
        ("tenants", "2"),
        ("peers", "1"),
    ]
    [href] = re.findall(r'href="([^"]*requested=2024-11-05[^"]*)"', html)
    drill = auditor_client.get(href.replace("&amp;", "&")).content.decode()
    assert drill.count('class="dep-tenant"') == 2 and drill.count('class="dep-peer"') == 1 and P1 in drill
    only_a2a = auditor_client.get(URL, {"protocol": "a2a"}).content.decode()
    assert only_a2a.count('class="dep-row"') == 2
    since = (TODAY - dt.timedelta(days=45)).isoformat()
    wide = auditor_client.get(URL, {"protocol": "mcp", "since": since}).content.decode()
    assert re.search(r'data-requested="2024-11-05">.*?data-col="exchanges">6<', wide, re.S)
    bad = auditor_client.get(URL, {"since": TODAY.isoformat(), "until": since})
    assert bad.status_code == 200 and "must not be after" in bad.content.decode()
    assert auditor_client.get(DRILL, {"protocol": "smtp"}).status_code == 400


@pytest.mark.django_db
def test_what_if_on_the_page(auditor_client: Client) -> None:
    _world()
    html = auditor_client.get(URL, {"whatif_protocol": "mcp", "floor": "2025-03-26"}).content.decode()
    numbers = dict(re.findall(r'data-whatif="(\w+)">(\d+)<', html))
    assert numbers == {"exchanges": "5", "accepted": "4", "tenants": "2", "peers": "1"}
    refused = auditor_client.get(URL, {"whatif_protocol": "mcp", "floor": "1.0"})
    assert refused.status_code == 200
    body = refused.content.decode()
    assert "is not an MCP version" in body and 'data-whatif="' not in body


@pytest.mark.django_db
def test_csv_exports_of_the_table_and_the_drill_down(auditor_client: Client) -> None:
    _world()
    rows = _csv(auditor_client.get(URL, {"protocol": "mcp", "format": "csv"}))
    assert [
        (r["protocol"], r["requested"], r["exchanges"], r["accepted"], r["refused"], r["tenants"], r["peers"])
        for r in rows
    ] == [
        ("mcp", "2025-03-26", "3", "3", "0", "2", "2"),
        ("mcp", "2024-11-05", "5", "4", "1", "2", "1"),
        ("mcp", "", "2", "2", "0", "1", "1"),
    ]
    assert rows[1]["firstSeen"] == (TODAY - dt.timedelta(days=10)).isoformat()
    assert rows[1]["lastSeen"] == (TODAY - dt.timedelta(days=2)).isoformat()
    query = {"protocol": "mcp", "requested": "2024-11-05", "format": "csv"}
    tenants = _csv(auditor_client.get(DRILL, {**query, "table": "tenants"}))
    assert [(t["tenant"], t["exchanges"], t["accepted"], t["peers"]) for t in tenants] == [
        ("acme", "3", "2", "1"),
        ("globex", "2", "2", "1"),
    ]
    peers = _csv(auditor_client.get(DRILL, {**query, "table": "peers"}))
    assert [(p["peerDigest"], p["tenants"], p["exchanges"]) for p in peers] == [(P1, "2", "4")]


@pytest.mark.django_db
def test_who_may_see_it(client: Client) -> None:
    _world()
    anonymous = client.get(URL)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/admin/login/?next=")
    assert client.get(DRILL, {"protocol": "mcp"}).status_code == 302
    member = roles.tenant_user("acme")
    client.login(username=member.username, password=member.password)
    assert client.get(URL).status_code == 403
    assert client.get(URL, {"format": "csv"}).status_code == 403
    assert client.get(DRILL, {"protocol": "mcp", "requested": "2024-11-05", "format": "csv"}).status_code == 403
    plain_staff = User.objects.create_user("stan-staff", password=roles.PASSWORD, is_staff=True)
    client.force_login(plain_staff)
    assert client.get(URL).status_code == 403
    for account in (roles.operator(), roles.auditor()):
        client.login(username=account.username, password=account.password)
        assert client.get(URL).status_code == 200
        assert client.get(DRILL, {"protocol": "mcp", "requested": "2024-11-05"}).status_code == 200
    client.force_login(User.objects.create_superuser("root", password=roles.PASSWORD))
    assert client.get(URL).status_code == 200
    assert client.post(URL).status_code == 405


@pytest.mark.django_db
def test_the_view_reads_only_the_rollup(auditor_client: Client) -> None:
    _world()
    with CaptureQueriesContext(connection) as queries:
        assert auditor_client.get(URL, {"whatif_protocol": "mcp", "floor": "2025-06-18"}).status_code == 200
        assert auditor_client.get(URL, {"format": "csv"}).status_code == 200
        for table in ("tenants", "peers"):
            drill = {"protocol": "mcp", "requested": "2024-11-05", "table": table}
            assert auditor_client.get(DRILL, drill).status_code == 200
            assert auditor_client.get(DRILL, {**drill, "format": "csv"}).status_code == 200
        version_usage(protocol="mcp", tenant_slug="acme", versions_below="2025-06-18")
    sql = " ".join(q["sql"] for q in queries.captured_queries)
    assert "audit_negotiationpeerdaily" in sql
    assert "audit_hostevent" not in sql and "runs_runevent" not in sql


@pytest.mark.django_db
def test_the_rollup_grows_with_peers_and_days_not_records(tenant: Tenant) -> None:
    # 30,000 records in one INSERT ... SELECT over 30 days, 2 versions and 50 peers.
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO audit_hostevent (tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at)
            SELECT %s, 'gen', '{}'::jsonb, 'evt-gen-' || lpad(n::text, 12, '0'), 'negotiation.decided',
                   jsonb_build_object('protocol', 'mcp', 'requested', CASE WHEN n %% 2 = 0 THEN '2024-11-05'
                                      ELSE '2025-03-26' END, 'peerDigest', md5((n %% 50)::text),
                                      'outcome', CASE WHEN n %% 7 = 0 THEN 'refused' ELSE 'accepted' END),
                   true, n, %s::timestamptz - (n %% 30) * interval '1 day'
            FROM generate_series(1, 30000) AS n
            """,
            [tenant.pk, _at(0)],
        )
        cursor.execute("ANALYZE audit_negotiationpeerdaily")
    rollup_rows = NegotiationPeerDaily.unscoped_all_tenants.count()
    print(f"30000 records -> {rollup_rows} rollup rows")
    assert rollup_rows <= 30 * 2 * 50
    table = {r.requested: r for r in version_table(window=Window.last_days(30))}
    assert table["2024-11-05"].exchanges + table["2025-03-26"].exchanges == 30000
    assert table["2024-11-05"].peers == 25 and table["2025-03-26"].peers == 25  # the parity of n splits the 50 peers
    plan = str(NegotiationPeerDaily.unscoped_all_tenants.filter(protocol="mcp", day__gte=TODAY).explain())
    assert "audit_hostevent" not in plan and "runs_runevent" not in plan
