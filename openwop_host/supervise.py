"""`make run`'s supervisor: the host's processes started, watched, restarted, and stopped together.

`make run` hands it the command lines (the Makefile keeps them, so `make -n run` shows them):

    python -m openwop_host.supervise --child "NAME LOG COMMAND..." [--child ...]

LOG is where the child writes (a path, or `-` for this terminal). The supervisor:
- refuses to start when another `make run` holds this checkout's lock (var/run.lock, naming its
  pid); the lock is an flock, so it ends with its process, however that ends;
- starts (or joins) the embedded PostgreSQL when DATABASE_URL is unset, holds it while the host
  runs, and starts it again when it dies;
- starts each child; one that exits is started again with a line on the terminal, after 1 s, then
  doubling while it keeps dying within STEADY_SECONDS of its start; after GIVE_UP_AFTER such quick
  deaths in a row the whole host stops, loudly, with the end of that child's log;
- on Ctrl-C (or SIGTERM, SIGHUP) stops every child (SIGTERM, then SIGKILL after STOP_SECONDS),
  then leaves the embedded server, which stops with its last holder. A child also gets SIGTERM if
  the supervisor itself dies (Linux: PR_SET_DEATHSIG), so nothing outlives it.

Everything the host writes under var/ is for this user only: the supervisor and its children run
with umask 077 (SECURITY.md §Files on disk).

`python -m openwop_host.supervise --check` only says whether this checkout's host is already
running (exit 1 with the pid) and starts nothing: `make run` asks it before `make setup`.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

BASE_DIR = Path(__file__).resolve().parent.parent
LOCK_NAME = "run.lock"
STEADY_SECONDS = 10.0  # a child that ran this long before it died was working: its next start is quick
GIVE_UP_AFTER = 5  # quick deaths in a row before the host stops
MAX_BACKOFF_SECONDS = 30.0
STOP_SECONDS = 20.0  # how long a child has to end after SIGTERM (a worker finishing its tasks)
TICK_SECONDS = 0.25


def _say(message: str) -> None:
    print(f"make run: {message}", flush=True)


def _read_env_file() -> None:
    """The checkout's `.env`, as settings read it (real variables win), so DATABASE_URL or
    OPENWOP_VAR_DIR set there mean the same thing here."""
    import environ

    env_file = Path(os.environ.get("OPENWOP_ENV_FILE") or BASE_DIR / ".env")
    if env_file.is_file():
        environ.Env.read_env(env_file, overwrite=False)


def var_dir() -> Path:
    return Path(os.environ.get("OPENWOP_VAR_DIR") or BASE_DIR / "var")


# ---------------------------------------------------------------------------------------------
# One `make run` per checkout


class AlreadyRunning(Exception):
    def __init__(self, pid: str) -> None:
        super().__init__(pid)
        self.pid = pid


def take_lock(path: Path) -> int:
    """Hold `path`'s flock for the life of this process and write our pid in it; AlreadyRunning
    (with the holder's pid) when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise AlreadyRunning(holder) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd  # not inherited by children (Python's descriptors are close-on-exec)


def _refusal(lock: Path, pid: str) -> str:
    return (
        f"this checkout's host is already running (make run, pid {pid}; lock {lock}). Stop it first "
        "(Ctrl-C in its terminal), or run the second host from another checkout."
    )


# ---------------------------------------------------------------------------------------------
# Children


@dataclass
class Child:
    name: str
    log: str  # a path, or "-" for the terminal
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    quick_deaths: int = 0
    restart_at: float | None = None
    log_file: IO[bytes] | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, spec: str) -> Child:
        parts = spec.split(None, 2)
        if len(parts) != 3:
            raise argparse.ArgumentTypeError(f"--child wants 'NAME LOG COMMAND...', not {spec!r}")
        import shlex

        return cls(name=parts[0], log=parts[1], argv=shlex.split(parts[2]))

    def where(self) -> str:
        return "this terminal" if self.log == "-" else self.log


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies (Linux; elsewhere a no-op)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start(child: Child) -> None:
    if child.log == "-":
        output: int | IO[bytes] | None = None
    else:
        fd = os.open(child.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a log an earlier release left 0644
        child.log_file = os.fdopen(fd, "wb")
        output = child.log_file
    child.process = subprocess.Popen(  # noqa: S603 - the Makefile's own command lines
        child.argv, stdout=output, stderr=subprocess.STDOUT if output is not None else None,
        stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )  # fmt: skip
    child.started_at = time.monotonic()
    child.restart_at = None


def _close_log(child: Child) -> None:
    if child.log_file is not None:
        child.log_file.close()
        child.log_file = None


def _tail(child: Child, lines: int = 20) -> str:
    if child.log == "-":
        return ""
    with contextlib.suppress(OSError):
        return "\n".join(Path(child.log).read_text(errors="replace").splitlines()[-lines:])
    return ""


class GiveUp(Exception):
    pass


def after_exit(child: Child, now: float) -> None:
    """A child exited on its own: when to start it again, or GiveUp."""
    assert child.process is not None
    code = child.process.returncode
    ran = now - child.started_at
    _close_log(child)
    child.quick_deaths = child.quick_deaths + 1 if ran < STEADY_SECONDS else 0
    if child.quick_deaths >= GIVE_UP_AFTER:
        raise GiveUp(
            f"{child.name} exited {child.quick_deaths} times in a row within {STEADY_SECONDS:.0f} s of its "
            f"start (last exit code {code}); stopping the host. The end of its log ({child.where()}):\n"
            f"{_tail(child)}"
        )
    delay = min(MAX_BACKOFF_SECONDS, 2.0**child.quick_deaths)
    _say(f"{child.name} exited (code {code}, after {ran:.0f} s); starting it again in {delay:.0f} s "
         f"(log {child.where()})")  # fmt: skip
    child.restart_at = now + delay


# ---------------------------------------------------------------------------------------------
# The embedded PostgreSQL


@dataclass
class Database:
    """The embedded server of this checkout, held by the supervisor and started again when it dies."""

    pgdata: Path
    quick_deaths: int = 0
    started_at: float = 0.0
    restart_at: float | None = None

    def hold(self) -> None:
        from openwop_host import embedded_postgres

        embedded_postgres.acquire(self.pgdata)
        self.started_at = time.monotonic()

    def watch(self, now: float) -> None:
        from openwop_host import embedded_postgres

        if self.restart_at is None:
            if embedded_postgres.running_pid(self.pgdata) is not None:
                return
            self.quick_deaths = self.quick_deaths + 1 if now - self.started_at < STEADY_SECONDS else 0
            if self.quick_deaths >= GIVE_UP_AFTER:
                raise GiveUp(f"the embedded PostgreSQL died {self.quick_deaths} times in a row; stopping the host "
                             f"(its log: {self.pgdata / 'log'})")  # fmt: skip
            delay = min(MAX_BACKOFF_SECONDS, 2.0 ** (self.quick_deaths - 1)) if self.quick_deaths else 0.0
            _say(f"the embedded PostgreSQL stopped; starting it again{f' in {delay:.0f} s' if delay else ''} "
                 f"(its log: {self.pgdata / 'log'})")  # fmt: skip
            self.restart_at = now + delay
        if now < self.restart_at:
            return
        self.restart_at = None
        self.started_at = now
        try:
            server = embedded_postgres.restart_if_stopped(self.pgdata)
        except embedded_postgres.EmbeddedPostgresRefused as refused:
            _say(f"the embedded PostgreSQL did not start: {refused}")
            return  # the next tick counts it as another quick death
        if server is not None:
            _say(f"the embedded PostgreSQL is running again (pid {server.pid})")


# ---------------------------------------------------------------------------------------------
# The loop


class Supervisor:
    def __init__(self, children: list[Child], database: Database | None) -> None:
        self.children = children
        self.database = database
        self.stopping = False
        self.signals = 0

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signals += 1
        self.stopping = True
        if self.signals > 1:  # a second Ctrl-C: no more waiting
            for child in self.children:
                if child.process is not None and child.process.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        child.process.kill()

    def run(self) -> int:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        code = 0
        try:
            if self.database is not None:
                self.database.hold()
            for child in self.children:
                start(child)
            while not self.stopping:
                time.sleep(TICK_SECONDS)
                self._tick(time.monotonic())
        except GiveUp as given_up:
            _say(str(given_up))
            code = 1
        finally:
            self._stop_children()
        return code

    def _tick(self, now: float) -> None:
        if self.database is not None:
            self.database.watch(now)
        for child in self.children:
            if self.stopping:
                return
            if child.restart_at is not None:
                if now >= child.restart_at:
                    start(child)
                    assert child.process is not None
                    _say(f"{child.name} started again (pid {child.process.pid})")
            elif child.process is not None and child.process.poll() is not None:
                after_exit(child, now)

    def _stop_children(self) -> None:
        running = [c for c in self.children if c.process is not None and c.process.poll() is None]
        for child in running:
            assert child.process is not None
            with contextlib.suppress(ProcessLookupError):
                child.process.terminate()
        deadline = time.monotonic() + STOP_SECONDS
        for child in running:
            assert child.process is not None
            try:
                child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _say(f"{child.name} did not stop within {STOP_SECONDS:.0f} s of SIGTERM; killing it")
                child.process.kill()
                child.process.wait()
        for child in self.children:
            _close_log(child)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m openwop_host.supervise", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="only say whether this checkout's host runs")
    parser.add_argument("--child", action="append", type=Child.parse, default=[], metavar="'NAME LOG COMMAND...'")
    args = parser.parse_args(argv)
    _read_env_file()
    lock = var_dir() / LOCK_NAME
    os.umask(0o077)
    try:
        fd = take_lock(lock)
    except AlreadyRunning as running:
        _say(_refusal(lock, running.pid))
        return 1
    if args.check:
        os.close(fd)
        return 0
    embedded = not os.environ.get("DATABASE_URL")
    database = Database(var_dir().resolve() / "pg") if embedded else None
    try:
        return Supervisor(args.child, database).run()
    except Exception as exc:  # the embedded server refused to start: its message says what to do
        from openwop_host.embedded_postgres import EmbeddedPostgresRefused

        if isinstance(exc, EmbeddedPostgresRefused):
            _say(f"the embedded PostgreSQL did not start: {exc}")
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
