"""Records written at chosen instants through this release's own append statement (so their chain is
the real one), for tests of expiry, export and verification."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from apps.audit.chain import APPEND_SQL, content_hash
from apps.audit.host_event_types import NEGOTIATION_DECIDED
from apps.audit.models import HostEventStream
from apps.core.ids import mint_opaque
from apps.tenants.subject import Subject


def record_at(subject: Subject, at: datetime, payload: dict[str, Any] | None = None) -> None:
    """One `negotiation.decided` record of the Subject's stream written at `at`."""
    payload = payload if payload is not None else {"protocol": "a2a", "outcome": "accepted", "version": "1.0"}
    wire = subject.as_wire()
    event_id = mint_opaque()
    params = {
        "tenant_id": [subject.tenant_pk], "subject_id": [subject.subject_id], "subject": [json.dumps(wire)],
        "event_id": [event_id], "type": [NEGOTIATION_DECIDED], "payload": [json.dumps(payload)],
        "durable": [True], "ordinal": [1], "at": [at],
        "content": [content_hash(tenant=subject.tenant, subject_id=subject.subject_id, subject=wire,
                                 event_id=event_id, type=NEGOTIATION_DECIDED, durable=True, at=at, payload=payload)],
    }  # fmt: skip
    with transaction.atomic():
        HostEventStream.unscoped_all_tenants.bulk_create(
            [HostEventStream(tenant_id=subject.tenant_pk, subject_id=subject.subject_id)], ignore_conflicts=True
        )
        with connection.cursor() as cursor:
            cursor.execute(APPEND_SQL, params)
            assert cursor.fetchone() is not None


def tamper(sql: str, params: list[Any], *, table: str = "audit_hostevent") -> None:
    """Change a table behind its append-only trigger's back (as someone with the database would)."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no deferred FK check may be pending at ALTER
        cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER {table}_append_only")
        cursor.execute(sql, params)
        cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER {table}_append_only")
