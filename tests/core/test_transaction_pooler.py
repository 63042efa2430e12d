"""OPENWOP_DB_TRANSACTION_POOLER=1 (issue 51 item 5): what the host does behind a transaction-mode
pooler, checked on real connections to PostgreSQL in a process of its own (settings are read once).

- Django's connections and the doors' async pool prepare no statement (psycopg's prepare_threshold
  None): after the same statement ran more often than psycopg's threshold, `pg_prepared_statements`
  of that session is empty (and is not without the setting, which proves the probe sees them).
- Server-side cursors are off (DISABLE_SERVER_SIDE_CURSORS).
- What needs a session (the invalidation listener's LISTEN, beat's and retention's advisory locks)
  connects to DATABASE_DIRECT_URL; without one the settings refuse to load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import asyncio, json, django
django.setup()
from django.conf import settings
from django.db import connection
from apps.core import async_db
from apps.core.invalidation import _conninfo as listener_conninfo

out = {}
default = settings.DATABASES["default"]
out["options_prepare_threshold"] = default.get("OPTIONS", {}).get("prepare_threshold", "absent")
out["server_side_cursors_off"] = default.get("DISABLE_SERVER_SIDE_CURSORS", False)
connection.ensure_connection()
out["django_prepare_threshold"] = connection.connection.prepare_threshold

async def doors():
    async with async_db.pooled_connection() as conn:
        for _ in range(10):
            await conn.execute("SELECT %s::int + 1", [1])
        prepared = (await (await conn.execute("SELECT count(*) FROM pg_prepared_statements")).fetchone())[0]
        threshold = conn.prepare_threshold
    await async_db.async_pool_close()
    return prepared, threshold

out["doors_prepared"], out["doors_prepare_threshold"] = asyncio.run(doors())
out["conninfo"] = async_db.conninfo()
out["direct_conninfo"] = async_db.conninfo(direct=True)
out["listener_conninfo"] = listener_conninfo()
with async_db.direct_session_lock(0x51515151, "openwop-pooler-test") as taken:
    with async_db.direct_session_lock(0x51515151, "openwop-pooler-test-2") as again:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.objid = %s AND l.granted", [0x51515151])
            holders = [r[0] for r in cursor.fetchall()]
out["lock"] = [taken, again, holders]
print(json.dumps(out))
"""


def _server() -> tuple[str, str]:
    """A direct URL and a second spelling of it (another host name, same server), so which one a
    connection used shows in its conninfo; the `postgres` database, read only."""
    url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        pytest.skip(f"needs the PostgreSQL on loopback (DATABASE_URL is {parts.hostname})")
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0] + "@" if len(netloc) == 2 else ""
    port = parts.port or 5432
    return f"postgres://{user}127.0.0.1:{port}/postgres", f"postgres://{user}localhost:{port}/postgres"


def _run(env: dict[str, str], tmp_path: Path, code: str = PROBE) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_URL", "OPENWOP_"))}
    base.update({
        "DJANGO_SETTINGS_MODULE": "openwop_host.settings", "DJANGO_DEBUG": "1", "OPENWOP_VAR_DIR": str(tmp_path),
        "OPENWOP_ENV_FILE": str(tmp_path / "absent.env"), "DATABASE_POOL_MAX_SIZE": "2",
    })  # fmt: skip
    base.update(env)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=base, capture_output=True, text=True, timeout=60)


def _probe(env: dict[str, str], tmp_path: Path) -> dict[str, object]:
    result = _run(env, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_behind_a_transaction_pooler_nothing_is_prepared_and_sessions_go_direct(tmp_path: Path) -> None:
    pooler, direct = _server()  # the "pooler" spelling is 127.0.0.1, the direct one localhost
    env = {"DATABASE_URL": pooler, "DATABASE_DIRECT_URL": direct, "OPENWOP_DB_TRANSACTION_POOLER": "1"}
    out = _probe(env, tmp_path)
    assert out["options_prepare_threshold"] is None
    assert out["server_side_cursors_off"] is True
    assert out["django_prepare_threshold"] is None
    assert out["doors_prepare_threshold"] is None and out["doors_prepared"] == 0
    assert "host='127.0.0.1'" in str(out["conninfo"])
    assert "host='localhost'" in str(out["direct_conninfo"]) and out["listener_conninfo"] == out["direct_conninfo"]
    taken, again, holders = out["lock"]  # type: ignore[misc]
    assert taken is True and again is False and holders == ["openwop-pooler-test"]


def test_without_the_setting_statements_are_prepared_and_the_direct_url_is_unused(tmp_path: Path) -> None:
    """The control: the same probe sees psycopg's prepared statement when nothing turns them off,
    and DATABASE_DIRECT_URL alone changes no connection."""
    pooler, direct = _server()
    out = _probe({"DATABASE_URL": pooler, "DATABASE_DIRECT_URL": direct}, tmp_path)
    assert out["options_prepare_threshold"] == "absent" and out["server_side_cursors_off"] is False
    assert out["doors_prepare_threshold"] == 5 and int(str(out["doors_prepared"])) >= 1
    assert out["direct_conninfo"] == out["conninfo"] == out["listener_conninfo"]
    assert "host='127.0.0.1'" in str(out["conninfo"])


def test_the_pooler_without_a_direct_url_is_refused(tmp_path: Path) -> None:
    pooler, _ = _server()
    env = {"DATABASE_URL": pooler, "OPENWOP_DB_TRANSACTION_POOLER": "1"}
    result = _run(env, tmp_path, "import django; django.setup()")
    assert result.returncode != 0
    assert "OPENWOP_DB_TRANSACTION_POOLER=1 needs DATABASE_DIRECT_URL" in result.stderr
