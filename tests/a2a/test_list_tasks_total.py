"""ListTasks' totalSize stays exact (A2A 1.0: every task the request matches, before pagination)
while no longer counting the tenant's rows, and one page costs the same number of queries however
many tasks it shows (bench/README.md §ListTasks scaling)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from apps.core.ids import mint_opaque
from apps.runs.models import Run, RunTally
from apps.tenants.models import Tenant
from tests.a2a.conftest import Caller, advance, immediately, user_message


def _send(caller: Caller, message_id: str, **fields: Any) -> str:
    """A task of the approval fixture (it waits once advanced), unless `fields` name another skill."""
    fields.setdefault("metadata", {"openwop": {"skillId": "conformance-approval"}})
    task = caller.rpc("SendMessage", immediately(user_message(message_id, **fields))).json()["result"]["task"]
    return str(task["id"])


def _total(caller: Caller, **params: Any) -> int:
    result = caller.rpc("ListTasks", {"pageSize": 1, **params}).json()["result"]
    return int(result.get("totalSize", 0))


def _tenant_pk(caller: Caller) -> int:
    return Tenant.objects.get(slug=caller.tenant).pk


def _counted_rows(caller: Caller) -> int:
    return Run.objects.for_tenant(_tenant_pk(caller)).count()


def _counts_runs(sql: str) -> bool:
    """A statement that counts the runs table's rows (not the tally's)."""
    return re.search(r"COUNT\([^)]*\)\s+FROM\s+(\(SELECT 1 FROM\s+)?\"?runs_run\b", sql, re.IGNORECASE) is not None


def test_total_size_is_exact_across_creates_status_changes_and_cancels(acme: Caller, globex: Caller) -> None:
    assert _total(acme) == 0
    first, second, third = (_send(acme, f"t-{i}") for i in range(3))
    _send(acme, "t-ctx", contextId="ctx-total")
    for i in range(5):  # another tenant's runs, more of them: never in acme's totals
        _send(globex, f"g-{i}", contextId="ctx-total")
    assert _total(acme) == 4 == _counted_rows(acme)
    assert _total(globex) == 5 == _counted_rows(globex)

    assert advance(first).status == "waiting-approval"  # a status change leaves the total alone
    assert acme.rpc("CancelTask", {"id": second}).json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert _total(acme) == 4 and _total(globex) == 5

    # Filtered requests count what they match, in the caller's tenant only.
    assert _total(acme, status="TASK_STATE_SUBMITTED") == 2  # third and t-ctx
    assert _total(acme, status="TASK_STATE_INPUT_REQUIRED") == 1
    assert _total(acme, status="TASK_STATE_CANCELED") == 1
    assert _total(acme, status="TASK_STATE_COMPLETED") == 0
    assert _total(acme, contextId="ctx-total") == 1
    assert _total(globex, contextId="ctx-total") == 5
    own_context = Run.unscoped_all_tenants.get(run_id=third).context_id or third  # minted: its own
    assert _total(acme, contextId=own_context) == 1
    since = Run.unscoped_all_tenants.get(run_id=second).updated_at.isoformat().replace("+00:00", "Z")
    assert _total(acme, statusTimestampAfter=since) == 1
    assert _total(globex, status="TASK_STATE_SUBMITTED") == 5


def test_total_size_follows_rows_added_and_deleted_by_any_path(acme: Caller, globex: Caller) -> None:
    """The tally counts rows, not service calls: runs copied in by the ORM (as bulk loads and the
    admin would) count, and deleted ones stop counting, in their own tenant only. (On PostgreSQL a
    run with events cannot be deleted at all: its log is append-only.)"""
    template = Run.unscoped_all_tenants.get(run_id=_send(acme, "d-0"))
    _send(globex, "d-x")
    copies = []
    for _ in range(3):
        template.pk, template.run_id = None, f"acme/{mint_opaque()}"
        template.save(force_insert=True)
        copies.append(template.run_id)
    assert _total(acme) == 4 == _counted_rows(acme)
    Run.unscoped_all_tenants.filter(run_id__in=copies[:2]).delete()
    assert _total(acme) == 2 == _counted_rows(acme)
    assert _total(globex) == 1
    Run.unscoped_all_tenants.filter(run_id=copies[2]).delete()
    assert _total(acme) == 1 and _total(globex) == 1


def test_unfiltered_total_reads_the_tally_not_the_runs(acme: Caller, globex: Caller) -> None:
    for i in range(3):
        _send(acme, f"r-{i}")
    _send(globex, "r-x")
    tally = RunTally.objects.for_tenant(_tenant_pk(acme))
    assert sum(tally.values_list("runs", flat=True)) == 3
    with CaptureQueriesContext(connection) as ctx:
        assert _total(acme) == 3
    counts = [q["sql"] for q in ctx.captured_queries if _counts_runs(q["sql"])]
    assert counts == [], counts  # the only aggregate left is the tally's SUM
    assert any("runs_runtally" in q["sql"] for q in ctx.captured_queries)
    # Filtered by status alone: the tally's per-status columns, no COUNT either.
    with CaptureQueriesContext(connection) as ctx:
        assert _total(acme, status="TASK_STATE_SUBMITTED") == 3
    assert not any(_counts_runs(q["sql"]) for q in ctx.captured_queries), ctx.captured_queries
    # A filter the tally cannot answer still counts the rows it matches (exactly; through its index).
    with CaptureQueriesContext(connection) as ctx:
        assert _total(acme, contextId="no-such-context") == 0
    assert any(_counts_runs(q["sql"]) for q in ctx.captured_queries)


def test_a_filtered_total_counts_only_up_to_its_bound(acme: Caller, globex: Caller) -> None:
    """Issue 49 item 4: a filter the tally cannot answer counts at most OPENWOP_LIST_TOTAL_EXACT_UP_TO
    rows (its cost does not grow with the history); past it the total is the bound, a floor, and
    the page tokens still lead through every task. Unfiltered totals stay exact from the tally."""
    for i in range(5):
        _send(acme, f"b-{i}", contextId="ctx-bound")
    _send(globex, "b-x", contextId="ctx-bound")
    with override_settings(OPENWOP_LIST_TOTAL_EXACT_UP_TO=3):
        assert _total(acme, contextId="ctx-bound") == 3  # the floor, not 5
        assert _total(acme) == 5  # the tally: exact however many
        assert _total(globex, contextId="ctx-bound") == 1  # under the bound: exact
        seen: list[str] = []
        token = ""
        while True:
            result = acme.rpc("ListTasks", {"pageSize": 2, "contextId": "ctx-bound", "pageToken": token}).json()
            seen += [task["id"] for task in result["result"]["tasks"]]
            assert result["result"]["totalSize"] == 3
            token = result["result"]["nextPageToken"]
            if not token:
                break
        assert len(set(seen)) == 5
    with override_settings(OPENWOP_LIST_TOTAL_EXACT_UP_TO=5):
        assert _total(acme, contextId="ctx-bound") == 5  # at the bound: still exact


def _page_queries(caller: Caller, **params: Any) -> tuple[int, dict[str, Any]]:
    with CaptureQueriesContext(connection) as ctx:
        result = caller.rpc("ListTasks", params).json()["result"]
    statements = [q["sql"] for q in ctx.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    return len(statements), result


@pytest.mark.parametrize("include_artifacts", [False, True])
def test_a_page_costs_the_same_queries_for_n_and_3n_tasks(acme: Caller, include_artifacts: bool) -> None:
    """No query per task: messages, open interrupts and artifacts are read once per page."""

    def grow_to(n: int) -> None:
        for i in range(_counted_rows(acme), n):
            if i % 3 == 0:
                _send(acme, f"q-{i}", text=f"hello {i}")  # submitted
            elif i % 3 == 1:
                advance(_send(acme, f"q-{i}", text=f"hello {i}"))  # waiting on its approval
            else:
                echo = {"metadata": {"openwop": {"skillId": "echo"}}}
                advance(_send(acme, f"q-{i}", text=f"hello {i}", **echo))  # completed, with an artifact

    params = {"includeArtifacts": include_artifacts, "historyLength": 10}
    grow_to(3)
    _page_queries(acme, **params)  # first-use reads (facet seeding) are not the page's cost
    small, small_page = _page_queries(acme, **params)
    grow_to(9)
    large, large_page = _page_queries(acme, **params)
    assert len(small_page["tasks"]) == 3 and len(large_page["tasks"]) == 9
    assert large == small
    # The prefetched reads still show each task its own messages, interrupt and artifacts.
    for task in large_page["tasks"]:
        assert [m["taskId"] for m in task["history"]] == [task["id"]]
        state = task["status"]["state"]
        if state == "TASK_STATE_INPUT_REQUIRED":
            assert task["status"]["message"]["parts"]
        has_artifacts = bool(task.get("artifacts"))
        assert has_artifacts == (include_artifacts and state == "TASK_STATE_COMPLETED"), task
    states = sorted(t["status"]["state"] for t in large_page["tasks"])
    assert states == ["TASK_STATE_COMPLETED"] * 3 + ["TASK_STATE_INPUT_REQUIRED"] * 3 + ["TASK_STATE_SUBMITTED"] * 3
