"""Every negotiation leaves exactly one content-free `negotiation.decided` record
(interop.md §The audit event), and auditors browse them read-only."""

from __future__ import annotations

import csv
import io

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from apps.agents.services import workflow_fixtures_seed
from apps.audit.models import HostEvent
from apps.audit.selectors import host_event_cursor_open, host_events_after
from apps.facets.models import Facet
from apps.facets.negotiation import NEGOTIATION_EVENT, negotiation_decide, peer_origin_digest
from apps.facets.services import facet_ensure
from apps.runs.models import RunEvent
from apps.runs.services import run_create
from apps.tenants.selectors import subject_from_api_key
from apps.tenants.services import tenant_get_or_create

pytestmark = pytest.mark.django_db
PEER = "https://peer-agent.example.net:8443/a2a/jsonrpc?token=x"
RECORD_KEYS = {"protocol", "outcome", "version", "requested", "floor", "reason", "peerDigest", "at"}


@pytest.fixture
def a2a_with_floor() -> None:
    # Written past validation (the door serves 1.0 only, so 0.3 is not offerable): a row from before
    # the servable check, which negotiation must still refuse below the floor.
    facet_ensure(protocol="a2a")
    Facet.objects.filter(protocol="a2a").update(versions=["0.3", "1.0"], minimum_version="1.0", preferred_version="1.0")


def _records(subject) -> list[HostEvent]:  # type: ignore[no-untyped-def]
    events = HostEvent.unscoped_all_tenants.filter(subject_id=subject.subject_id, type=NEGOTIATION_EVENT)
    return list(events.order_by("sequence"))


def _assert_content_free(payload: dict) -> None:  # type: ignore[type-arg]
    assert set(payload) <= RECORD_KEYS
    assert payload["peerDigest"] == peer_origin_digest("https://peer-agent.example.net:8443")
    text = repr(payload)
    assert "peer-agent" not in text and "example.net" not in text and "token" not in text


@pytest.mark.parametrize(
    ("requested", "outcome", "version", "reason"),
    [
        ("1.0", "accepted", "1.0", "ok"),
        (None, "accepted", "1.0", "ok"),
        ("0.3", "refused", None, "below-floor"),
        ("9.9", "refused", None, "unsupported"),
    ],
)
def test_each_decision_leaves_exactly_one_host_event(make_key, a2a_with_floor, requested, outcome, version, reason):  # type: ignore[no-untyped-def]
    subject = subject_from_api_key(make_key("acme"))
    decision = negotiation_decide(protocol="a2a", requested=requested, peer_origin=PEER, subject=subject)
    assert decision.outcome == outcome
    records = _records(subject)
    assert len(records) == 1
    event = records[0]
    assert event.durable is True
    payload = event.payload
    _assert_content_free(payload)
    assert payload["protocol"] == "a2a" and payload["outcome"] == outcome and payload["reason"] == reason
    assert payload.get("version") == version
    assert payload.get("requested") == requested
    assert payload["floor"] == "1.0"


def test_the_record_is_on_the_callers_stream_only(make_key, a2a_with_floor) -> None:  # type: ignore[no-untyped-def]
    caller = subject_from_api_key(make_key("acme"))
    colleague = subject_from_api_key(make_key("acme"))
    stranger = subject_from_api_key(make_key("globex"))
    subjects = (caller, colleague, stranger)
    cursors = {s.subject_id: host_event_cursor_open(subject=s, last_event_id=None) for s in subjects}
    negotiation_decide(protocol="a2a", requested="1.0", peer_origin=PEER, subject=caller)
    seen = {sid: host_events_after(cursor=c, after=0) for sid, c in cursors.items()}
    assert [e.type for e in seen[caller.subject_id]] == [NEGOTIATION_EVENT]
    assert seen[colleague.subject_id] == [] and seen[stranger.subject_id] == []


def test_with_a_run_the_record_goes_on_the_run_log(make_key, a2a_with_floor) -> None:  # type: ignore[no-untyped-def]
    subject = subject_from_api_key(make_key("acme"))
    workflow_fixtures_seed(tenant=tenant_get_or_create(slug="acme")[0])
    run = run_create(subject=subject, workflow_id="conformance-noop", inputs={}, transport="rest")
    negotiation_decide(protocol="a2a", requested="0.3", peer_origin=PEER, subject=subject, run=run)
    records = list(RunEvent.unscoped_all_tenants.filter(run=run, type=NEGOTIATION_EVENT))
    assert len(records) == 1
    _assert_content_free(records[0].payload)
    assert records[0].payload["outcome"] == "refused"
    assert _records(subject) == []  # not also a host event
    sequences = list(RunEvent.unscoped_all_tenants.filter(run=run).values_list("sequence", flat=True))
    assert sequences == list(range(1, len(sequences) + 1))


@pytest.fixture
def auditor_client(client: Client) -> Client:
    user = User.objects.create_user("aud", "aud@example.test", "x", is_staff=True)
    user.groups.add(Group.objects.get_or_create(name="auditors")[0])
    client.force_login(user)
    return client


URL = "/host/openwop-host/audit/negotiations"


def test_auditors_filter_chart_and_export(auditor_client: Client, make_key, a2a_with_floor) -> None:  # type: ignore[no-untyped-def]
    acme = subject_from_api_key(make_key("acme"))
    globex = subject_from_api_key(make_key("globex"))
    negotiation_decide(protocol="a2a", requested="1.0", peer_origin=PEER, subject=acme)
    negotiation_decide(protocol="a2a", requested="0.3", peer_origin=PEER, subject=acme)
    negotiation_decide(protocol="mcp", requested="2026-07-28", peer_origin=PEER, subject=globex)

    page = auditor_client.get(URL).content.decode()
    assert page.count('class="neg-row"') == 3
    # One chart per protocol: a2a accepted 1 + refused 1, mcp accepted 1.
    a2a_chart, mcp_chart = page.split('id="neg-chart-a2a"')[1].split("<h2>Records")[0].split('id="neg-chart-mcp"')
    assert 'data-outcome="accepted" data-count="1"' in a2a_chart
    assert 'data-outcome="refused" data-count="1"' in a2a_chart
    assert 'data-outcome="accepted" data-count="1"' in mcp_chart
    assert 'data-outcome="refused"' not in mcp_chart

    refused = auditor_client.get(URL, {"outcome": "refused"}).content.decode()
    assert refused.count('class="neg-row"') == 1 and "below-floor" in refused
    assert auditor_client.get(URL, {"protocol": "mcp"}).content.decode().count('class="neg-row"') == 1
    assert auditor_client.get(URL, {"tenant": "acme"}).content.decode().count('class="neg-row"') == 2
    assert auditor_client.get(URL, {"requested": "0.3"}).content.decode().count('class="neg-row"') == 1
    assert (
        auditor_client.get(URL, {"since": "2000-01-01", "until": "2000-12-31"})
        .content.decode()
        .count('class="neg-row"')
        == 0
    )

    export = auditor_client.get(URL, {"format": "csv", "tenant": "acme"})
    assert export["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert rows[0][:4] == ["at", "tenant", "protocol", "outcome"]
    assert sorted(r[3] for r in rows[1:]) == ["accepted", "refused"]
    assert all("peer-agent" not in ",".join(r) for r in rows)


def test_downgrade_is_derived_from_version_other_than_requested() -> None:
    from apps.audit.negotiations import outcome_class

    assert outcome_class({"outcome": "accepted", "requested": "1.0", "version": "0.9"}) == "downgraded"
    assert outcome_class({"outcome": "accepted", "requested": "1.0", "version": "1.0"}) == "accepted"
    assert outcome_class({"outcome": "refused", "requested": "0.3"}) == "refused"


def test_non_auditors_are_sent_to_login(client: Client) -> None:
    client.force_login(User.objects.create_user("op", "op@example.test", "x", is_staff=True))
    response = client.get(URL)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    anonymous = Client().get(URL)
    assert anonymous.status_code == 302


def test_the_page_is_read_only(auditor_client: Client) -> None:
    assert auditor_client.post(URL, {}).status_code == 405
