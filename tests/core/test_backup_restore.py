"""`manage.py backup` and `manage.py restore` (docs/operators/backup-and-restore.md), black-box: a
live host with data (tasks made through the a2a-sdk, their records, a push config and a webhook
with sealed secrets, a peer credential, an active card key) is backed up with the server's own
pg_dump, restored into a new database on the same server, and a live process on the restored
database answers GetTask and serves a signed card; `audit_verify` says the same of both, and
every sealed value opens. Runs on whichever server the suite runs on: PostgreSQL 15 of
DATABASE_URL, or the embedded PostgreSQL 18 (`make test` without DATABASE_URL), whose pg_dump only
the wheel has.

The refusals: a database that is not empty, a damaged dump, a dump of a newer release, a server
version no pg_dump here matches."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
import psycopg
import pytest
from a2a.types import GetTaskRequest, TaskState
from a2a.utils.errors import TaskNotFoundError
from django.db import connection
from django.test import override_settings

from apps.a2a.services import card_key_activate, card_key_generate
from apps.core.backups import BackupRefused, pg_tool_find
from apps.peers.services import peer_credential_create
from apps.push.services import push_config_create, webhook_register
from apps.tenants.selectors import subject_from_api_key
from tests.a2a.live import CARD_PATH, Session, db_read, live_card, only_task, user_message
from tests.a2a.test_card_signing import fetch_card, protected_header, verifier
from tests.live import ROOT, _database_url, start_web

pytestmark = pytest.mark.slow
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
SECRETS = ["tok-backup-push-0b7e", "whsec-backup-hook-51c2", "peer-backup-token-9ad4"]


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip


def _server() -> psycopg.Connection[Any]:
    url = urlsplit(_database_url())
    return psycopg.connect(
        host=unquote(url.hostname or "") if url.hostname else None, port=url.port, user=url.username or None,
        password=unquote(url.password) if url.password else None, dbname="postgres", autocommit=True,
    )  # fmt: skip


@pytest.fixture
def new_database() -> Iterator[Any]:
    """`new_database(suffix)`: an empty database on the test server, as DATABASE_URL; dropped after."""
    made: list[str] = []

    def _make(suffix: str) -> str:
        name = f"{connection.settings_dict['NAME']}_{suffix}"
        with _server() as server:
            server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            server.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return _database_url().rsplit("/", 1)[0] + "/" + name

    yield _make
    with _server() as server:
        for name in made:
            server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _relations(database_url: str) -> int:
    url = urlsplit(database_url)
    with psycopg.connect(
        host=unquote(url.hostname or ""), port=url.port, user=url.username or None,
        password=unquote(url.password) if url.password else None, dbname=url.path.lstrip("/"),
    ) as conn:  # fmt: skip
        row = conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'"
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture(autouse=True)
def public_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    import ipaddress

    monkeypatch.setattr("apps.core.egress.resolve_host", lambda host, port: [ipaddress.ip_address("93.184.216.34")])


async def test_a_backup_restores_into_a_new_database_that_serves_what_the_host_served(  # type: ignore[no-untyped-def]
    live_url: str, live_worker, live_env, make_key, tmp_path: Path, new_database
) -> None:
    env, var_dir = live_env
    acme_key, globex_key = await db_read(lambda: (make_key("acme"), make_key("globex")))
    card = await live_card(live_url)
    acme = Session(card, "JSONRPC", acme_key)
    try:
        done = await only_task(acme.client(), user_message(prefix="backup", data={"n": 1}, skill="echo"))
        waiting = await only_task(
            acme.client(), user_message(prefix="backup-wait", text="x", skill="conformance-approval"), immediately=True
        )
        for _ in range(600):  # the worker suspends it on its approval
            if (await acme.client().get_task(GetTaskRequest(id=waiting.id))).status.state == INPUT_REQUIRED:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the approval task never waited for input\n{live_worker.log()[-3000:]}")
    finally:
        await acme.close()

    def seed() -> str:
        # Sealed as the live host seals: under its SECRET_KEY.
        with override_settings(SECRET_KEY=env["DJANGO_SECRET_KEY"]):
            subject = subject_from_api_key(acme_key)
            push_config_create(subject=subject, task_id=waiting.id, url="https://hooks.example.com/push",
                               token=SECRETS[0])  # fmt: skip
            webhook_register(subject=subject, url="https://hooks.example.com/hook", events=["run.completed"],
                             secret=SECRETS[1])  # fmt: skip
            peer_credential_create(subject=subject, url="https://peer.example.com/", secret=SECRETS[2])
            key = card_key_activate(key_pk=card_key_generate(algorithm="EdDSA", actor="test").pk, actor="test")
            return key.kid

    kid = await db_read(seed)
    verified = _manage(env, "audit_verify")
    assert verified.returncode == 0 and not verified.stdout.startswith("intact: 0 "), verified

    # The backup: a private folder, the server's own pg_dump, a manifest without a credential.
    folder = tmp_path / "backups" / "first"
    made = _manage(env, "backup", "--to", str(folder))
    assert made.returncode == 0, made.stderr
    assert (folder.stat().st_mode & 0o777, {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}) == (
        0o700, {"database.dump": 0o600, "manifest.json": 0o600},
    )  # fmt: skip
    manifest = json.loads((folder / "manifest.json").read_text())
    major = await db_read(lambda: connection.pg_version // 10000)
    assert manifest["server"]["major"] == major and manifest["dump"]["pgDumpVersion"].split(".")[0] == str(major)
    assert manifest["dump"]["size"] == (folder / "database.dump").stat().st_size
    assert any(m.startswith("agents.") and m.endswith("_agent_a2a_tenant_stored") for m in manifest["migrations"])
    text = (folder / "manifest.json").read_text() + made.stdout + made.stderr
    for secret in [env["DJANGO_SECRET_KEY"], *SECRETS]:
        assert secret not in text
    assert set(manifest) == {"format", "hostVersion", "createdAt", "server", "dump", "migrations", "keepApart"}

    # Restored into a new database: it opens every sealed value and proves the same records.
    restored_url = new_database("restored")
    restored_env = {**env, "DATABASE_URL": restored_url}
    restored = _manage(restored_env, "restore", "--from", str(folder))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "every sealed value opens" in restored.stdout
    again = _manage(restored_env, "audit_verify")
    assert (again.returncode, again.stdout) == (0, verified.stdout)
    doctor = _manage(restored_env, "doctor", "secrets")
    assert doctor.returncode == 0 and "every stored secret opens" in doctor.stdout, doctor

    # A live process on the restored database serves: GetTask, isolation, the signed card.
    web, restored_live = start_web(restored_env, var_dir)
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            signed = await fetch_card(http, f"{restored_live}{CARD_PATH}")
        verifier(restored_live)(signed)  # as served, before it is re-pointed at the test port
        assert protected_header(signed)["kid"] == kid
        served = await live_card(restored_live)
        acme, globex = Session(served, "JSONRPC", acme_key), Session(served, "JSONRPC", globex_key)
        try:
            got = await acme.client().get_task(GetTaskRequest(id=done.id))
            assert got.id == done.id and got.status.state == TaskState.TASK_STATE_COMPLETED
            assert got.artifacts and got.artifacts[0] == done.artifacts[0]
            still = await acme.client().get_task(GetTaskRequest(id=waiting.id))
            assert still.status.state == INPUT_REQUIRED
            with pytest.raises(TaskNotFoundError):  # another tenant's task is simply not there
                await globex.client().get_task(GetTaskRequest(id=done.id))
        finally:
            await acme.close()
            await globex.close()
    finally:
        web.stop()

    # Refused, nothing written: a database that is not empty...
    twice = _manage(restored_env, "restore", "--from", str(folder))
    assert twice.returncode == 2 and "is not empty" in twice.stderr, twice
    empty_url = new_database("empty")
    empty_env = {**env, "DATABASE_URL": empty_url}
    # ...a damaged copy...
    damaged = tmp_path / "damaged"
    shutil.copytree(folder, damaged)
    with (damaged / "database.dump").open("r+b") as dump:
        dump.seek(manifest["dump"]["size"] // 2)
        byte = dump.read(1)
        dump.seek(-1, os.SEEK_CUR)
        dump.write(bytes([byte[0] ^ 0xFF]))
    refused = _manage(empty_env, "restore", "--from", str(damaged))
    assert refused.returncode == 2 and "does not match its manifest" in refused.stderr, refused
    # ...and a dump of a newer release.
    newer = tmp_path / "newer"
    shutil.copytree(folder, newer)
    ahead = {**manifest, "migrations": [*manifest["migrations"], "agents.9999_from_the_future"]}
    (newer / "manifest.json").write_text(json.dumps(ahead))
    refused = _manage(empty_env, "restore", "--from", str(newer))
    assert refused.returncode == 2 and "newer release" in refused.stderr and "9999_from_the_future" in refused.stderr
    assert _relations(empty_url) == 0
    # A folder that is not empty is not written into.
    refused = _manage(env, "backup", "--to", str(folder))
    assert refused.returncode == 2 and "not empty" in refused.stderr


def test_a_server_version_without_its_pg_dump_is_refused_naming_what_to_install() -> None:
    with pytest.raises(BackupRefused) as refused:
        pg_tool_find("pg_dump", major=99)
    message = refused.value.message
    assert "PostgreSQL 99" in message and "postgresql-client-99" in message and "OPENWOP_PG_BIN_DIR" in message
