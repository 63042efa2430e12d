"""Which database failures are "the database is out of reach" (503 + Retry-After) and which are a
broken request (apps/core/overload.py): by psycopg's error class and SQLSTATE, with real failures
from real servers, never by message text. The first case is what a SIGKILLed embedded PostgreSQL
leaves: its socket file is still there, and nobody listens on it ("Connection refused")."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection, connections
from psycopg import errors

from apps.core.overload import is_overload
from tests.live import free_port


def _params(**overrides: Any) -> dict[str, Any]:
    db = connection.settings_dict
    params = {"host": db["HOST"] or "127.0.0.1", "port": db["PORT"] or 5432, "user": db["USER"],
              "password": db.get("PASSWORD") or "", "dbname": db["NAME"], "connect_timeout": 10}  # fmt: skip
    params.update(overrides)
    return params


def _raised(call: Any) -> BaseException:
    try:
        call()
    except BaseException as exc:
        return exc
    raise AssertionError("it did not fail")


@pytest.fixture
def dead_socket_dir(tmp_path: Path) -> Iterator[Path]:
    """A socket file nobody listens on, where a server's was (bound, never listening: refused)."""
    folder = Path("/tmp") / f"openwop-dead-{tmp_path.name[-12:]}"
    folder.mkdir(mode=0o700)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(folder / ".s.PGSQL.5432"))
    yield folder
    sock.close()
    (folder / ".s.PGSQL.5432").unlink()
    folder.rmdir()


def test_a_refused_unix_socket_is_out_of_reach(dead_socket_dir: Path) -> None:
    exc = _raised(lambda: psycopg.connect(host=str(dead_socket_dir), port=5432, user="postgres", dbname="x"))
    assert "Connection refused" in str(exc) and "connection failed" not in str(exc)  # what the old check missed
    assert is_overload(exc)


def test_no_server_at_all_is_out_of_reach(tmp_path: Path) -> None:
    assert is_overload(_raised(lambda: psycopg.connect(host=str(tmp_path), port=5432, user="postgres", dbname="x")))
    assert is_overload(_raised(lambda: psycopg.connect(host="127.0.0.1", port=free_port(), user="p", dbname="x")))


def test_djangos_wrapped_connect_failure_is_out_of_reach(db: None, dead_socket_dir: Path) -> None:
    settings_dict = {**connections["default"].settings_dict, "HOST": str(dead_socket_dir), "PORT": "5432"}
    settings_dict["OPTIONS"] = {k: v for k, v in settings_dict["OPTIONS"].items() if k != "pool"}
    wrapper = type(connections["default"])(settings_dict, "unreachable")
    exc = _raised(wrapper.ensure_connection)
    assert type(exc).__module__.startswith("django.db") and is_overload(exc)


def test_a_connection_ended_under_it_is_out_of_reach(transactional_db: None) -> None:
    """pg_terminate_backend (what a fast shutdown or an operator does): 57P01 on its next statement,
    and the connection is lost for good after."""
    victim = psycopg.connect(**_params(), autocommit=True)
    pid = victim.info.backend_pid
    with psycopg.connect(**_params(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    first = _raised(lambda: victim.execute("SELECT 1"))
    assert isinstance(first, errors.AdminShutdown) and is_overload(first)
    assert is_overload(_raised(lambda: victim.execute("SELECT 1")))  # "the connection is closed"
    victim.close()


def test_a_failing_statement_on_a_live_connection_is_not(transactional_db: None) -> None:
    with psycopg.connect(**_params(), autocommit=True) as conn:
        assert not is_overload(_raised(lambda: conn.execute("SELECT FROM no_such_table")))
        conn.execute("CREATE TEMP TABLE once (id int PRIMARY KEY)")
        conn.execute("INSERT INTO once VALUES (1)")
        assert not is_overload(_raised(lambda: conn.execute("INSERT INTO once VALUES (1)")))
        assert not is_overload(_raised(lambda: conn.execute("SELECT 1/0")))
        # A pipeline after one of its statements failed: aborted, on a live connection.
        # Where the failure surfaces depends on how fast the server answers (a unix socket's
        # embedded server reports it at the next execute already): every step is watched.
        failures: list[psycopg.Error] = []

        def attempt(step: Callable[[], object]) -> None:
            try:
                step()
            except psycopg.Error as exc:
                failures.append(exc)

        try:
            with conn.pipeline() as pipeline:
                attempt(lambda: conn.execute("INSERT INTO once VALUES (1)"))
                attempt(lambda: conn.execute("SELECT 1").fetchone())
                attempt(pipeline.sync)
        except psycopg.Error as exc:
            failures.append(exc)
        assert failures and not any(is_overload(exc) for exc in failures), failures
