"""The embedded PostgreSQL (openwop_host/embedded_postgres.py) keeps other local accounts out.

- It asks for its password, even of its own user; another local account (made here with useradd)
  cannot connect, with the data folder at an ordinary path and at one too long for a unix socket
  (the socket then lives in a private folder of the temporary directory), not even with the password.
- A socket folder that someone else made, or made open, is refused rather than used.
- No folder above var/ changes mode, even run as root with folders only root may enter.
- A data folder made by the previous release (trust authentication; run as root, owned by the
  server user it made) converts on its first start: the password is set, the data kept, the log
  says so; a server of that release still running is refused with what to do.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from apps.core.file_modes import private_folder
from openwop_host import embedded_postgres as ep
from tests.live import ROOT, wait_until

LONG = "a-folder-name-long-enough-that-the-socket-path-passes-a-hundred-bytes-" * 2


@pytest.fixture
def tree() -> Iterator[Path]:
    """A fresh folder any account may traverse (0755), as a home or /work is, outside pytest's own
    temporary root (0700): what keeps another account out must then be the host's doing."""
    folder = Path(tempfile.mkdtemp(prefix="openwop-ep-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def other_user() -> Iterator[pwd.struct_passwd]:
    """A second local account, made for this test and removed after it."""
    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("setpriv") is None:
        pytest.skip("adding a second local account needs root, useradd and setpriv")
    name = f"owprobe{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)


def _connect_as(user: pwd.struct_passwd, host: Path, password: str = "") -> subprocess.CompletedProcess[str]:
    code = (
        "import sys, psycopg; psycopg.connect(host=sys.argv[1], port=5432, user='postgres', dbname='postgres',"
        " password=sys.argv[2], connect_timeout=10).close(); print('connected')"
    )
    return subprocess.run(
        ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--",
         sys.executable, "-c", code, str(host), password],
        capture_output=True, text=True, timeout=60, cwd="/", env={"PATH": os.environ["PATH"]},
    )  # fmt: skip


@contextlib.contextmanager
def _held(pgdata: Path) -> Iterator[ep.Server]:
    server = ep.acquire(pgdata)
    try:
        yield server
    finally:
        ep.release(pgdata, delete=True)


@pytest.mark.parametrize("where", ["ordinary path", "path too long for a socket"])
def test_another_local_account_cannot_connect(tree: Path, other_user: pwd.struct_passwd, where: str) -> None:
    var = private_folder(tree / LONG / "var" if where != "ordinary path" else tree / "var")
    pgdata = var / "pg"
    with _held(pgdata) as server:
        if where == "ordinary path":
            assert server.socket_dir == pgdata.resolve()
        else:  # a private folder of the temporary directory, made 0700 and this user's
            assert server.socket_dir.parent == Path(tempfile.gettempdir()) and server.socket_dir != pgdata
            info = server.socket_dir.lstat()
            assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
        # Its own user: the password, always.
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(host=str(server.socket_dir), port=5432, user="postgres", dbname="postgres").close()
        psycopg.connect(**ep._params(server, "postgres")).close()
        # Another account: not without it, not even with it (the socket's folder is not theirs to enter).
        for password in ("", server.password):
            probe = _connect_as(other_user, server.socket_dir, password)
            assert probe.returncode != 0 and "connected" not in probe.stdout, probe.stdout
            assert "Permission denied" in probe.stderr, probe.stderr
        assert stat.S_IMODE(ep.password_file(pgdata).stat().st_mode) == 0o600
        assert stat.S_IMODE(var.stat().st_mode) == 0o700


def test_a_socket_folder_that_is_not_private_is_refused(tree: Path) -> None:
    pgdata = private_folder(tree / LONG / "var") / "pg"
    folder = ep.socket_dir_for(pgdata.resolve())
    assert folder != pgdata.resolve()
    try:
        os.mkdir(folder, 0o700)
        folder.chmod(0o777)  # made open, by whoever got there first
        with pytest.raises(ep.EmbeddedPostgresRefused, match="not private to this user"):
            ep.acquire(pgdata)
        folder.rmdir()
        folder.symlink_to(tree)  # a link to somewhere else
        with pytest.raises(ep.EmbeddedPostgresRefused, match="not private to this user"):
            ep.acquire(pgdata)
    finally:
        with contextlib.suppress(OSError):
            folder.unlink() if folder.is_symlink() else folder.rmdir()
    assert ep.running_pid(pgdata) is None


def test_no_folder_above_var_changes_mode(tree: Path) -> None:
    """Folders only their owner may enter (0700, 0750, 0711), as /root is: the server still starts
    (run as root: in a user namespace of its own) and every mode above var/ stays as it was."""
    levels = [tree / "a", tree / "a" / "b", tree / "a" / "b" / "c"]
    for level, mode in zip(levels, (0o700, 0o750, 0o711), strict=True):
        level.mkdir()
        level.chmod(mode)
    var = private_folder(levels[-1] / "var")
    above = [var.parent, *var.parent.parents]
    before = {str(path): stat.S_IMODE(path.stat().st_mode) for path in above}
    bin_before = {str(path): stat.S_IMODE(path.stat().st_mode) for path in (ep.bin_dir(), *ep.bin_dir().parents)}
    with _held(var / "pg") as server, psycopg.connect(**ep._params(server)) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert {str(path): stat.S_IMODE(path.stat().st_mode) for path in above} == before
    assert {str(p): stat.S_IMODE(p.stat().st_mode) for p in (ep.bin_dir(), *ep.bin_dir().parents)} == bin_before


def _start_trusting(pgdata: Path) -> subprocess.Popen[bytes]:
    """The previous release's server: trust authentication, its socket in the data folder."""
    process = subprocess.Popen(
        ep._command([str(ep.bin_dir() / "postgres"), "-D", str(pgdata), "-k", str(pgdata), "-c", "listen_addresses="]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip

    def ready() -> bool:
        with contextlib.suppress(psycopg.OperationalError):
            psycopg.connect(host=str(pgdata), port=5432, user="postgres", dbname="postgres").close()
            return True
        return False

    wait_until(ready, "the previous release's server answered", timeout=120)
    return process


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)


def test_the_previous_releases_data_folder_converts(tree: Path, other_user: pwd.struct_passwd) -> None:
    var = private_folder(tree / "var")
    pgdata = var / "pg"
    # What the previous release's initdb made: every local connection trusted.
    done = subprocess.run(
        ep._command([str(ep.bin_dir() / "initdb"), "-D", str(pgdata), "--auth=trust", "--auth-local=trust",
                     "--encoding=utf8", "-U", "postgres"]),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    old = _start_trusting(pgdata)
    try:
        with psycopg.connect(host=str(pgdata), port=5432, user="postgres", dbname="postgres", autocommit=True) as c:
            c.execute("CREATE DATABASE openwop")
        with psycopg.connect(host=str(pgdata), port=5432, user="postgres", dbname="openwop", autocommit=True) as c:
            c.execute("CREATE TABLE kept (note text)")
            c.execute("INSERT INTO kept VALUES ('written under the previous release')")
        # Still running: refused, with what to do (its socket is the old release's, and trusting).
        with pytest.raises(ep.EmbeddedPostgresRefused, match="started by an earlier release is running"):
            ep.acquire(pgdata)
    finally:
        _stop(old)
    # Run as root, the previous release gave var/pg to a server user of its own.
    for folder, dirs, files in os.walk(pgdata):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(folder, name), other_user.pw_uid, other_user.pw_gid)
    os.lchown(pgdata, other_user.pw_uid, other_user.pw_gid)

    # The first start of this release, as settings make it (and the last holder stops it after).
    first = subprocess.run(
        [sys.executable, "-c", "import sys, pathlib; from openwop_host.embedded_postgres import acquire;"
         " acquire(pathlib.Path(sys.argv[1]))", str(pgdata)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "made by an earlier release with trust authentication; the server now asks for a password" in first.stderr
    assert "an earlier release's server user" in first.stderr
    assert (pgdata / "pg_hba.conf").read_text().startswith(ep.HBA_MARKER)
    assert pgdata.stat().st_uid == os.geteuid() and stat.S_IMODE(ep.password_file(pgdata).stat().st_mode) == 0o600
    assert ep.running_pid(pgdata) is None  # stopped with its last holder

    with _held(pgdata) as server:
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(host=str(server.socket_dir), port=5432, user="postgres", dbname="openwop").close()
        with psycopg.connect(**ep._params(server)) as conn:
            assert conn.execute("SELECT note FROM kept").fetchall() == [("written under the previous release",)]
        probe = _connect_as(other_user, server.socket_dir)
        assert probe.returncode != 0 and "connected" not in probe.stdout


def test_a_killed_server_is_started_again_by_the_next_holder(tree: Path) -> None:
    """What `make run`'s supervisor calls (restart_if_stopped): a postmaster that was SIGKILLed,
    its backends still leaving, starts again on the same socket with the same data."""
    pgdata = private_folder(tree / "var") / "pg"
    with _held(pgdata) as server:
        with psycopg.connect(**ep._params(server), autocommit=True) as conn:
            conn.execute("CREATE TABLE survived (n int)")
            conn.execute("INSERT INTO survived VALUES (1)")
        os.kill(server.pid, signal.SIGKILL)
        wait_until(lambda: ep.running_pid(pgdata) is None, "the killed server was seen gone")
        again = ep.restart_if_stopped(pgdata)
        assert again is not None and again.pid != server.pid and again.socket_dir == server.socket_dir
        assert ep.restart_if_stopped(pgdata) is None  # running: nothing to do
        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(**ep._params(again)) as conn:
                    assert conn.execute("SELECT n FROM survived").fetchall() == [(1,)]
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
