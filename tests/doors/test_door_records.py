"""The door's cost and its audit trail (issue 13's pins): a warm GetTask is the task read and
the record's batch and nothing else; N concurrent exchanges leave exactly N records, sequences
consecutive, sharing commits; a record is readable from another connection the moment its
exchange's answer arrives."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db.backends.signals import connection_created

from apps.audit.group_commit import host_event_batcher
from apps.audit.models import HostEvent
from apps.core import async_db
from apps.core.async_db import conninfo
from apps.core.invalidation import cache_listening, wait_for
from apps.facets.negotiation import NEGOTIATION_EVENT
from apps.tenants.selectors import subject_from_api_key
from tests.a2a.conftest import user_message
from tests.doors.conftest import Door


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "A2A-Version": "1.0", "Content-Type": "application/json"}


def _get_task(task_id: str, request_id: int = 1) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "GetTask", "params": {"id": task_id}})


@pytest.fixture
def caller(door: Door, make_key) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    from apps.agents.services import workflow_fixtures_seed
    from apps.tenants.models import Tenant

    key = make_key("acme")
    workflow_fixtures_seed(tenant=Tenant.objects.get(slug="acme"))
    message = user_message("rec-1", metadata={"openwop": {"skillId": "conformance-noop"}})
    sent = door.request(
        "POST",
        "/a2a/jsonrpc",
        content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}),
        headers=_headers(key),
    ).json()
    return {"key": key, "task": sent["result"]["task"]["id"], "subject": subject_from_api_key(key)}


def _records(subject_id: str) -> list[int]:
    return list(
        HostEvent.unscoped_all_tenants.filter(subject_id=subject_id, type=NEGOTIATION_EVENT)
        .order_by("sequence")
        .values_list("sequence", flat=True)
    )


@pytest.fixture
def orm_statements() -> Iterator[list[str]]:
    """Every statement any Django connection opened from now on sends (the door's threads open
    their own)."""
    from django.db import connections

    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        seen.append(sql)
        return execute(sql, params, many, context)

    def install(sender, connection, **kwargs):  # type: ignore[no-untyped-def]
        connection.execute_wrappers.append(wrapper)

    connections.close_all()
    connection_created.connect(install)
    yield seen
    connection_created.disconnect(install)


def test_a_warm_gettask_is_the_read_and_the_record_batch(door: Door, caller: dict[str, Any], orm_statements) -> None:  # type: ignore[no-untyped-def]
    body = _get_task(caller["task"])
    assert wait_for(cache_listening, 30), "the invalidation listener never connected"
    for _ in range(3):  # fill the caches (a miss reads the key and the facet through the ORM)
        assert door.request("POST", "/a2a/jsonrpc", content=body, headers=_headers(caller["key"])).status_code == 200
    orm_statements.clear()
    before = async_db.statements_executed()
    answer = door.request("POST", "/a2a/jsonrpc", content=body, headers=_headers(caller["key"]))
    assert answer.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # The task read (1) and the record's batch: one statement that advances the stream and inserts
    # the record (its own transaction, apps/audit/group_commit.py).
    assert async_db.statements_executed() - before == 2
    assert orm_statements == []  # nothing through the ORM: no thread, no Django connection


def test_concurrent_exchanges_leave_one_record_each_consecutively(door: Door, caller: dict[str, Any]) -> None:
    subject_id = caller["subject"].subject_id
    existing = _records(subject_id)
    n = 40

    async def burst() -> list[Any]:
        return await asyncio.gather(
            *(
                door.client.post("/a2a/jsonrpc", content=_get_task(caller["task"], i), headers=_headers(caller["key"]))
                for i in range(n)
            )
        )

    stats_before = door.run(lambda: _stats())
    answers = door.run(burst)
    stats_after = door.run(lambda: _stats())
    assert [a.status_code for a in answers] == [200] * n
    assert all("result" in a.json() for a in answers)
    sequences = _records(subject_id)
    assert len(sequences) == len(existing) + n  # one record per exchange, none coalesced, none lost
    assert sequences == list(range(1, len(sequences) + 1))  # the stream has no gap and no duplicate
    commits = stats_after.commits - stats_before.commits
    assert stats_after.records - stats_before.records == n
    assert commits < n, "concurrent exchanges should share commits"


async def _stats() -> Any:
    stats = host_event_batcher().stats
    return type(stats)(**{name: getattr(stats, name) for name in stats.__slots__})


def test_a_record_is_readable_elsewhere_when_its_answer_arrives(door: Door, caller: dict[str, Any]) -> None:
    subject_id = caller["subject"].subject_id
    sql = "SELECT count(*) FROM audit_hostevent WHERE subject_id = %s AND type = %s"
    with psycopg.connect(conninfo(), autocommit=True) as elsewhere:
        for i in range(5):
            seen = elsewhere.execute(sql, (subject_id, NEGOTIATION_EVENT)).fetchone()[0]  # type: ignore[index]
            answer = door.request(
                "POST", "/a2a/jsonrpc", content=_get_task(caller["task"], i), headers=_headers(caller["key"])
            )
            assert answer.status_code == 200
            assert elsewhere.execute(sql, (subject_id, NEGOTIATION_EVENT)).fetchone()[0] == seen + 1  # type: ignore[index]


def test_a_refused_version_is_recorded_too(door: Door, caller: dict[str, Any]) -> None:
    subject_id = caller["subject"].subject_id
    before = len(_records(subject_id))
    headers = {**_headers(caller["key"]), "A2A-Version": "0.3"}
    answer = door.request("POST", "/a2a/jsonrpc", content=_get_task(caller["task"]), headers=headers)
    assert answer.json()["error"]["code"] == -32009
    newest = HostEvent.unscoped_all_tenants.filter(subject_id=subject_id, type=NEGOTIATION_EVENT).order_by("-sequence")
    assert len(_records(subject_id)) == before + 1
    payload = newest.first().payload  # type: ignore[union-attr]
    assert (payload["outcome"], payload["requested"]) == ("refused", "0.3")
