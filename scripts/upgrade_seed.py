"""The old release's half of `make upgrade-test` (scripts/upgrade_test.py): run by the release named
in deploy/upgrade-from, with its own code and virtualenv (cwd: its tree), so what it writes is what
that release writes: its services, its chain, its partitions.

    python upgrade_seed.py tenants acme,globex 3     # tenants, fixtures, 3 keys each: JSON on stdout
    UPGRADE_SEED_KEYS='["owk_..."]' python upgrade_seed.py records 200000 35
                                                     # records of those keys' Subjects over 35 days

`records` builds each record with the release's own `host_event_row` (its content hash), stamps it
at an instant spread over the days (and hashes it again), and appends the rows in batches through
the release's own group-commit writer (`HostEventBatcher.write`: the counters, the sequences and the
chain computed by its APPEND_SQL), after creating the record partitions for those days.
Only functions every release since the chain has had are used.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.getcwd())  # the old release's tree
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")

import django

django.setup()

from django.utils import timezone  # noqa: E402

BATCH = 2000


def tenants(slugs: str, keys_each: str) -> None:
    from apps.agents.services import workflow_fixtures_seed
    from apps.tenants.services import api_key_create, tenant_get_or_create

    keys: dict[str, list[str]] = {}
    for slug in slugs.split(","):
        tenant, _ = tenant_get_or_create(slug=slug)
        workflow_fixtures_seed(tenant=tenant)
        keys[slug] = [api_key_create(tenant=tenant, kind="user")[1] for _ in range(int(keys_each))]
    print(json.dumps(keys))


def records(count: str, days: str) -> None:
    from psycopg import AsyncConnection

    from apps.audit.chain import content_hash_of_texts
    from apps.audit.group_commit import HostEventBatcher
    from apps.audit.partitions import records_partitions_ensure
    from apps.audit.services import host_event_row
    from apps.core.async_db import conninfo
    from apps.tenants.selectors import subject_from_api_key

    total, span = int(count), timedelta(days=int(days))
    now = timezone.now()
    start = now - span
    records_partitions_ensure(now, since=start)
    subjects = [subject_from_api_key(raw) for raw in json.loads(os.environ["UPGRADE_SEED_KEYS"])]
    step = span / total

    def row(i: int) -> Any:
        at = start + step * i
        subject = subjects[i % len(subjects)]
        payload = {
            "protocol": "a2a" if i % 3 else "mcp", "outcome": "accepted", "reason": "ok", "floor": "1.0",
            "peerDigest": f"{i % 97:064x}", "at": at.isoformat().replace("+00:00", "Z"),
            "version": "1.0" if i % 3 else "2026-07-28", "requested": "1.0" if i % 3 else "2026-07-28",
        }  # fmt: skip
        appended = host_event_row(subject=subject, type="negotiation.decided", payload=payload, durable=True)
        appended.at = at
        appended.content = content_hash_of_texts(**appended.texts())
        return appended

    async def append() -> None:
        writer = HostEventBatcher()
        async with await AsyncConnection.connect(conninfo(), autocommit=True) as conn:
            for first in range(0, total, BATCH):
                batch = [row(i) for i in range(first, min(total, first + BATCH))]
                outcomes = await writer.write(conn, batch)
                failed = [o for o in outcomes if isinstance(o, BaseException)]
                if failed:
                    raise RuntimeError(f"{len(failed)} records refused: {failed[0]!r}")

    asyncio.run(append())
    print(json.dumps({"records": total, "from": start.isoformat(), "to": now.isoformat()}))


if __name__ == "__main__":
    {"tenants": tenants, "records": records}[sys.argv[1]](*sys.argv[2:])
