"""listRuns (runs.md §List) and getRun with its ETag (runs.md §Caching)."""

from __future__ import annotations

import pytest

from tests.envelope import assert_envelope
from tests.runs.conftest import Caller, advance
from tests.runs.wire_checks import assert_snapshot_doc

pytestmark = pytest.mark.django_db


def _segment(run_id: str) -> str:
    return run_id.replace("/", "~2F")


def test_list_is_newest_first_and_pages_with_a_cursor(acme: Caller) -> None:
    created = [acme.create_run("echo", {"i": i}) for i in range(5)]
    first = acme.get("/runs?limit=2").json()
    assert [r["runId"] for r in first["runs"]] == created[::-1][:2]
    second = acme.get(f"/runs?limit=2&cursor={first['nextCursor']}").json()
    third = acme.get(f"/runs?limit=2&cursor={second['nextCursor']}").json()
    assert [r["runId"] for r in second["runs"] + third["runs"]] == created[::-1][2:]
    assert "nextCursor" not in third
    for doc in first["runs"]:
        assert_snapshot_doc(doc)


def test_list_filters(acme: Caller) -> None:
    noop = acme.create_run("conformance-noop")
    echo = acme.create_run("echo")
    advance(noop)
    assert [r["runId"] for r in acme.get("/runs?workflowId=echo").json()["runs"]] == [echo]
    assert [r["runId"] for r in acme.get("/runs?status=completed").json()["runs"]] == [noop]
    assert acme.get("/runs?status=completed&workflowId=echo").json() == {"runs": []}


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "limit=x", "status=done", "cursor=forged"])
def test_list_refuses_bad_parameters(acme: Caller, query: str) -> None:
    assert_envelope(acme.get(f"/runs?{query}"), "validation_error", 400)


def test_list_shows_only_the_callers_tenant(acme: Caller, globex: Caller) -> None:
    mine = acme.create_run("echo")
    theirs = globex.create_run("echo")
    assert [r["runId"] for r in acme.get("/runs").json()["runs"]] == [mine]
    assert [r["runId"] for r in globex.get("/runs").json()["runs"]] == [theirs]


def test_a_cursor_of_another_tenant_is_refused(acme: Caller, globex: Caller) -> None:
    for _ in range(2):
        globex.create_run("echo")
    cursor = globex.get("/runs?limit=1").json()["nextCursor"]
    assert_envelope(acme.get(f"/runs?cursor={cursor}"), "validation_error", 400)


def test_get_etag_and_if_none_match(acme: Caller) -> None:
    run_id = acme.create_run("conformance-approval")
    first = acme.get(f"/runs/{_segment(run_id)}")
    etag = first.headers["ETag"]
    assert etag.startswith('"') and not etag.startswith("W/")
    assert acme.get(f"/runs/{_segment(run_id)}").headers["ETag"] == etag  # stable
    not_modified = acme.get(f"/runs/{_segment(run_id)}", **{"If-None-Match": etag})
    assert not_modified.status_code == 304 and not_modified.content == b""
    assert not_modified.headers["OpenWOP-Version"]
    advance(run_id)  # -> waiting-approval
    changed = acme.get(f"/runs/{_segment(run_id)}", **{"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["ETag"] != etag
    assert changed.json()["status"] == "waiting-approval"


def test_etag_changes_on_cancelling_which_has_no_event(acme: Caller) -> None:
    from apps.runs.models import Run, RunStatus

    run_id = acme.create_run("conformance-noop")
    etag = acme.get(f"/runs/{_segment(run_id)}").headers["ETag"]
    Run.unscoped_all_tenants.filter(run_id=run_id).update(status=RunStatus.CANCELLING)
    assert acme.get(f"/runs/{_segment(run_id)}").headers["ETag"] != etag
