"""A stream the database cannot serve is refused with a 503 envelope, never a 500.

Found by the SSE fan-out bench: with the connection pool exhausted, the stream's first read waited
out the pool's timeout and Django answered `500 Internal Server Error`. Here a live uvicorn connects
as a role of its own; the test then forbids that role every connection (CONNECTION LIMIT 0, its
sessions terminated), so every database read of the next request fails as it does when no
connection can be had, and `GET /runs/{id}/events` must answer 503 with the error envelope and a
Retry-After.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.db import connection

from tests.envelope import assert_envelope
from tests.live import _database_url, start_web


def test_stream_open_without_a_database_connection_is_503(live_env, transactional_db, make_key) -> None:  # type: ignore[no-untyped-def]
    env, var_dir = live_env
    role = f"openwop_sse_busy_{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(16)  # the embedded server authenticates (scram), a trust server ignores it
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")
        cursor.execute(f'GRANT pg_read_all_data, pg_write_all_data TO "{role}"')
    own = urlsplit(_database_url())
    url = urlunsplit(own._replace(netloc=f"{role}:{password}@{own.netloc.rpartition('@')[2]}"))
    assert urlsplit(url).username == role  # the URL itself is not printed: it holds a password
    own_env = {**env, "DATABASE_URL": url, "DATABASE_POOL_MAX_SIZE": "2", "DATABASE_POOL_TIMEOUT": "1"}
    daphne, base_url = start_web(own_env, var_dir)
    try:
        key = make_key("acme")
        headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        path = "/runs/acme~2F" + "Zz" * 13 + "/events"
        # With the database reachable the stream path answers (an unknown run: 404).
        assert_envelope(httpx.get(base_url + path, headers=headers, timeout=30), "not_found", 404)
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER ROLE "{role}" CONNECTION LIMIT 0')
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role])
        response = httpx.get(base_url + path, headers=headers, timeout=30)
        body = assert_envelope(response, "openwop-host.overloaded", 503)
        assert response.headers["Retry-After"].isdigit(), body
        assert "Traceback" not in response.text and role not in response.text
    finally:
        daphne.stop()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role])
            cursor.execute(f'DROP ROLE IF EXISTS "{role}"')
