"""GetTask's SQL, pinned (bench/README.md hot spots): the count per request is deterministic, so a
regression (a second facet read, a tenant lookup by slug, the whole event log read) fails here
before it shows up as lost throughput. The checks it must keep are asserted alongside: the caller
is authenticated, its durable `negotiation.decided` record is written, a foreign task reads as
absent."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.audit.models import HostEvent
from apps.tenants.models import Tenant
from tests.a2a.conftest import Caller, advance, immediately, user_message

# API key + tenant (one join), facet, the tenant's version policies (issue 24; a per-process cache
# hit in production, read here because the test's transaction bypasses the cache), the stream
# counter (UPDATE ... RETURNING), the record's INSERT, the run (+ workflow), its open interrupt,
# its artifacts, its messages; plus, in a test only, the savepoint pair the test's own transaction
# puts around the record's.
GETTASK_MAX_QUERIES = 11
# SendMessage (returnImmediately, request side only: the worker's part runs elsewhere), without
# the savepoints a test adds: API key, facet, the record (UPDATE + INSERT), the skill route, the
# messageId de-dup read, the idempotency claim (read + INSERT), the workflow, the run (INSERT +
# run.started INSERT + push fan-out read + 2 UPDATEs), the idempotency completion, the Message
# record, then the Task projection (run, artifacts, messages). It was 29 before the tenant pk rode
# on the Subject and the TCK route was asked only of TCK-shaped messageIds.
SENDMESSAGE_MAX_STATEMENTS = 19


def _waiting_task(caller: Caller) -> str:
    """A run suspended on its approval: the costliest projection (status, open interrupt, messages)."""
    approval = {"metadata": {"openwop": {"skillId": "conformance-approval"}}}  # the default is echo
    task = caller.rpc("SendMessage", immediately(user_message("q-1", **approval))).json()["result"]["task"]
    assert advance(task["id"]).status == "waiting-approval"
    return task["id"]


def _records(caller: Caller) -> int:
    tenant = Tenant.objects.get(slug=caller.tenant)
    return (
        HostEvent.objects.for_tenant(tenant)
        .filter(subject_id=caller.subject.subject_id, type="negotiation.decided")
        .count()
    )


def _sql(context: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in context.captured_queries]


def _statements(context: CaptureQueriesContext) -> list[str]:
    """What production runs too: a test's own transaction adds SAVEPOINT / RELEASE pairs."""
    return [s for s in _sql(context) if not s.startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]


def test_get_task_statement_count_is_pinned(acme: Caller, django_assert_max_num_queries: Any) -> None:
    task_id = _waiting_task(acme)
    before = _records(acme)
    with django_assert_max_num_queries(GETTASK_MAX_QUERIES), CaptureQueriesContext(connection) as ctx:
        body = acme.rpc("GetTask", {"id": task_id}).json()
    assert body["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert _records(acme) == before + 1  # the durable record is still written on every exchange
    sql = _sql(ctx)
    assert sum('"facets_facet"' in s for s in sql) == 1, sql  # the facet once per request
    assert not any(s.lstrip().startswith("SELECT") and 'FROM "tenants_tenant"' in s for s in sql), sql
    assert sum('"runs_runevent"' in s for s in sql) <= 1, sql


def test_get_task_of_another_tenant_costs_the_same_and_reads_as_absent(
    acme: Caller, globex: Caller, django_assert_max_num_queries: Any
) -> None:
    foreign = _waiting_task(globex)
    before = _records(acme)
    with django_assert_max_num_queries(GETTASK_MAX_QUERIES):
        body = acme.rpc("GetTask", {"id": foreign}).json()
    assert body["error"]["code"] == -32001
    assert _records(acme) == before + 1  # refused reads are negotiated and recorded too


def test_send_message_statement_count_is_pinned(acme: Caller) -> None:
    acme.rpc("SendMessage", immediately(user_message("warm-up")))  # first-use seeding is not the hot path
    before = _records(acme)
    with CaptureQueriesContext(connection) as ctx:
        body = acme.rpc("SendMessage", immediately(user_message("q-2"))).json()
    assert body["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert _records(acme) == before + 1
    statements = _statements(ctx)
    assert len(statements) <= SENDMESSAGE_MAX_STATEMENTS, "\n".join(statements)
    assert not any(s.lstrip().startswith("SELECT") and 'FROM "tenants_tenant"' in s for s in statements), statements
