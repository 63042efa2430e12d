"""`make run`'s supervisor (openwop_host/supervise.py) on its own, with small children of its own:
one that dies is started again, with a line; one that keeps dying at once stops the host loudly;
a second supervisor for the same checkout is refused, naming the first's pid; SIGTERM stops every
child. DATABASE_URL is set, so no embedded server is started (tests/test_make_run_supervised.py
plays the whole `make run`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live import ROOT, wait_until


def _env(var_dir: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OPENWOP_VAR_DIR": str(var_dir),
            "OPENWOP_ENV_FILE": str(var_dir / "absent.env"), "DATABASE_URL": "postgres://unused@127.0.0.1:1/none",
            "PYTHONUNBUFFERED": "1"}  # fmt: skip


def _supervise(var_dir: Path, *children: str, log: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "openwop_host.supervise"]
    for child in children:
        args += ["--child", child]
    return subprocess.Popen(args, cwd=ROOT, env=_env(var_dir), stdout=log.open("wb"), stderr=subprocess.STDOUT)


@pytest.fixture
def stopped() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def _pid_file_child(pid_file: Path) -> str:
    """A child that writes its pid and then lives until stopped."""
    code = f"import os, time, pathlib; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); time.sleep(600)"
    return f'sleeper {pid_file}.log {sys.executable} -c "{code}"'


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] if Path(f"/proc/{pid}").exists() else ""
    return state != "Z"


def test_a_dead_child_is_started_again_and_sigterm_stops_all(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    pid_file, log = tmp_path / "sleeper.pid", tmp_path / "supervise.log"
    supervisor = _supervise(tmp_path, _pid_file_child(pid_file), log=log)
    stopped.append(supervisor)
    first = int(wait_until(lambda: pid_file.exists() and pid_file.read_text(), "the child started"))
    pid_file.unlink()
    os.kill(first, signal.SIGKILL)
    second = int(wait_until(lambda: pid_file.exists() and pid_file.read_text(), "the child started again", 60))
    assert second != first
    said = log.read_text()
    assert "make run: sleeper exited (code -9" in said and f"sleeper started again (pid {second})" in said, said
    # Its log is the child's own, private to this user.
    assert (Path(f"{pid_file}.log").stat().st_mode & 0o777) == 0o600

    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=60) == 0
    assert not _alive(second)  # stopped with it


def test_a_second_supervisor_for_the_checkout_is_refused_naming_the_first(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    pid_file = tmp_path / "sleeper.pid"
    first = _supervise(tmp_path, _pid_file_child(pid_file), log=tmp_path / "first.log")
    stopped.append(first)
    wait_until(pid_file.exists, "the first supervisor's child started")
    for args in (["--check"], ["--child", "other - sleep 600"]):
        second = subprocess.run([sys.executable, "-m", "openwop_host.supervise", *args], cwd=ROOT,
                                env=_env(tmp_path), capture_output=True, text=True, timeout=60)  # fmt: skip
        assert second.returncode == 1
        assert f"already running (make run, pid {first.pid}; lock {tmp_path / 'run.lock'})" in second.stdout
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=60) == 0
    # The lock ends with its holder, however it ends: the next one runs.
    assert subprocess.run([sys.executable, "-m", "openwop_host.supervise", "--check"], cwd=ROOT,
                          env=_env(tmp_path), timeout=60).returncode == 0  # fmt: skip


def test_a_child_that_keeps_dying_at_once_stops_the_host_loudly(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "supervise.log"
    pid_file = tmp_path / "sleeper.pid"
    failing = f"broken {tmp_path}/broken.log {sys.executable} -c \"print('no such setting'); raise SystemExit(3)\""
    supervisor = _supervise(tmp_path, _pid_file_child(pid_file), failing, log=log)
    stopped.append(supervisor)
    assert supervisor.wait(timeout=120) == 1  # backoff 1 + 2 + 4 + 8 s, then it gives up
    said = log.read_text()
    assert "make run: broken exited 5 times in a row within 10 s of its start (last exit code 3)" in said, said
    assert "no such setting" in said  # the end of the child's log, on the terminal
    sleeper = int(pid_file.read_text())
    deadline = time.monotonic() + 30
    while _alive(sleeper) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(sleeper)  # the whole host stopped, not only the broken child
