"""In-process cost of the chain's independence from the writer's version (apps/audit/chain.py,
migration 0013): the record append statement of this release, with the stream table's trigger
installed, against the previous release's statement (0.19.0, 556a03d) without the trigger.

    DATABASE_URL=postgres://.../<a scratch database> .venv/bin/python bench/chain_head_cost.py [--n 10000] [--repeats 5]

The database must be migrated and is written to (tenant `bench-chainhead`, fresh streams per run);
the trigger is dropped for the "without" variants and created again before the script ends, so
never point it at a database that serves. Each variant runs `n` statements (psycopg, autocommit:
each is its own transaction, prepared after 5 executions, as the group commit runs them) for a
batch of 1 record and of 16 records of one stream, `repeats` times in alternation; it prints the
median over the repeats of each run's median, in microseconds per statement. The Python content
hash is the same in every variant and is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# The previous release's statement (git show 556a03d:apps/audit/chain.py APPEND_SQL), as in
# tests/audit/old_writers.py.
_LINK = "encode(sha256(convert_to({prev} || ':' || ({seq})::text || ':' || {content}, 'UTF8')), 'hex')"
PREVIOUS_SQL = f"""
WITH RECURSIVE r AS (
    SELECT * FROM unnest(
        %(tenant_id)b::bigint[], %(subject_id)b::text[], %(subject)b::text[], %(event_id)b::text[],
        %(type)b::text[], %(payload)b::text[], %(durable)b::boolean[], %(ordinal)b::bigint[],
        %(at)b::timestamptz[], %(content)b::text[]
    ) AS r(tenant_id, subject_id, subject, event_id, type, payload, durable, ordinal, at, content)
), wanted AS (
    SELECT tenant_id, subject_id, count(*) AS n FROM r GROUP BY tenant_id, subject_id
), locked AS MATERIALIZED (
    SELECT s.id, s.tenant_id, s.subject_id, s.last_sequence, s.last_digest, w.n FROM audit_hosteventstream AS s
    JOIN wanted AS w ON s.tenant_id = w.tenant_id AND s.subject_id = w.subject_id
    ORDER BY s.tenant_id, s.subject_id
    FOR UPDATE OF s
), chain AS (
    SELECT r.tenant_id, r.subject_id, r.ordinal, l.last_sequence + 1 AS sequence, l.last_digest::text AS prev,
           {_LINK.format(prev="l.last_digest", seq="l.last_sequence + 1", content="r.content")} AS digest
    FROM r JOIN locked AS l ON l.tenant_id = r.tenant_id AND l.subject_id = r.subject_id
    WHERE r.ordinal = 1
    UNION ALL
    SELECT r.tenant_id, r.subject_id, r.ordinal, c.sequence + 1, c.digest,
           {_LINK.format(prev="c.digest", seq="c.sequence + 1", content="r.content")}
    FROM chain AS c JOIN r ON r.tenant_id = c.tenant_id AND r.subject_id = c.subject_id AND r.ordinal = c.ordinal + 1
), bumped AS (
    UPDATE audit_hosteventstream AS s SET last_sequence = s.last_sequence + l.n, last_digest = c.digest
    FROM locked AS l JOIN chain AS c ON c.tenant_id = l.tenant_id AND c.subject_id = l.subject_id AND c.ordinal = l.n
    WHERE s.id = l.id
)
INSERT INTO audit_hostevent (
    tenant_id, subject_id, subject, event_id, type, payload, durable, sequence, at, prev_digest, digest
)
SELECT r.tenant_id, r.subject_id, r.subject::jsonb, r.event_id, r.type, r.payload::jsonb, r.durable,
       c.sequence, r.at, c.prev, c.digest
FROM r JOIN chain AS c ON c.tenant_id = r.tenant_id AND c.subject_id = r.subject_id AND c.ordinal = r.ordinal
RETURNING event_id, id, sequence, prev_digest, digest
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000, help="statements per variant and run")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openwop_host.settings")
    import django

    django.setup()
    import psycopg
    from django.utils import timezone

    from apps.audit.chain import APPEND_SQL
    from apps.core.ids import mint_opaque
    from apps.tenants.services import tenant_get_or_create

    migration = __import__("apps.audit.migrations.0013_chain_head", fromlist=["TRACK_HEAD"])
    tenant, _ = tenant_get_or_create(slug="bench-chainhead")
    subject = {"issuer": "bench", "subjectId": "bench", "tenant": tenant.slug, "lane": "api-key", "kind": "user"}
    payload = {"protocol": "a2a", "outcome": "accepted", "version": "1.0", "requested": "1.0", "peerDigest": "p" * 16}
    content = secrets.token_hex(32)  # any content hash: the Python half is the same in every variant

    def params(stream: str, size: int) -> dict[str, list[Any]]:
        now = timezone.now()
        return {"tenant_id": [tenant.pk] * size, "subject_id": [stream] * size,
                "subject": [json.dumps(subject)] * size, "event_id": [mint_opaque() for _ in range(size)],
                "type": ["negotiation.decided"] * size, "payload": [json.dumps(payload)] * size,
                "durable": [True] * size, "ordinal": list(range(1, size + 1)), "at": [now] * size,
                "content": [content] * size}  # fmt: skip

    variants = [
        ("previous statement, no trigger", PREVIOUS_SQL, False),
        ("this statement, trigger installed", APPEND_SQL, True),
        ("previous statement, trigger installed (an old pod during the upgrade)", PREVIOUS_SQL, True),
    ]
    results: dict[tuple[str, int], list[float]] = {}
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        try:
            for repeat in range(args.repeats):
                for label, sql, trigger in variants if repeat % 2 == 0 else variants[::-1]:
                    conn.execute(migration.UNTRACK_HEAD[0])
                    if trigger:
                        conn.execute(migration.TRACK_HEAD[1])
                    for size in (1, 16):
                        stream = f"{repeat}-{size}-{secrets.token_hex(4)}"
                        conn.execute(
                            "INSERT INTO audit_hosteventstream (tenant_id, subject_id, last_sequence)"
                            " VALUES (%s, %s, 0)",
                            [tenant.pk, stream],
                        )
                        times = []
                        with conn.cursor() as cursor:
                            for i in range(args.n // size + 20):
                                values = params(stream, size)
                                started = time.perf_counter()
                                cursor.execute(sql, values)
                                cursor.fetchall()
                                if i >= 20:  # warm-up: prepared, caches warm
                                    times.append(time.perf_counter() - started)
                        results.setdefault((label, size), []).append(statistics.median(times) * 1e6)
        finally:
            conn.execute(migration.UNTRACK_HEAD[0])
            conn.execute(migration.TRACK_HEAD[1])
    print(f"{args.n} records per variant and run, {args.repeats} runs; median of the runs' medians, us per statement:")
    for (label, size), medians in results.items():
        spread = f"{min(medians):.1f}-{max(medians):.1f}"
        print(f"  batch of {size:2d}: {label}: {statistics.median(medians):.1f} (runs {spread})")


if __name__ == "__main__":
    main()
