"""Issue 32 items 4, 5 and 7: the host `make run` starts, as a newcomer starts it.

- The run recipe's plan (`make -n run`) starts a Celery beat beside the worker, all through the
  supervisor (which stops it with the rest), and advertises the origin derived from HOST and PORT
  unless OPENWOP_PUBLIC_URL is set.
- Live, in a fresh clone (tests/test_fresh_clone.py's copy: installing is already done, so the
  bare venv gets the console scripts pip would have written) on this test's database (DATABASE_URL,
  so the run never depends on starting another server; every other setting is the clone's own
  `.env` and var/): `make run PORT=<p> GRPC_PORT=<g>` serves a card whose URLs name port p and
  the gRPC URL port g, signed by the key `make setup` activated; its beat sends the periodic jobs
  and the worker runs them; Ctrl-C (SIGINT to the process group, as a terminal sends it) leaves no
  process behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.live import ROOT, _database_url, free_port, process_env
from tests.test_fresh_clone import _clean_env, _clone

START_TIMEOUT = 300  # make setup in a fresh clone initialises and migrates a new embedded PostgreSQL first
BEAT_TIMEOUT = 120  # the stuck-run sweeper is due every 30 s


def _needs_make() -> None:
    if shutil.which("make") is None or shutil.which("git") is None:
        pytest.skip("make and git are needed to run the Makefile")


def _plan(*args: str, **extra_env: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "OPENWOP_"))}
    done = subprocess.run(
        ["make", "-n", "run", *args], cwd=ROOT, env={**env, **extra_env}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_run_recipe_starts_beat_and_advertises_host_and_port() -> None:
    _needs_make()
    plan = _plan("PORT=9000", "GRPC_PORT=50999")
    assert "celery -A openwop_host beat --schedule var/celerybeat-schedule" in plan
    assert "celery -A openwop_host worker" in plan
    # Every child through the supervisor, which restarts and stops them (openwop_host/supervise.py).
    assert "python -m openwop_host.supervise" in plan
    assert '--child "beat var/beat.log ' in plan and '--child "worker var/worker.log ' in plan
    assert "supervise --check" in plan  # a second make run is refused before setup
    assert "beat        periodic jobs" in plan  # the banner says so
    assert "advertised  http://127.0.0.1:9000  " in plan
    assert "127.0.0.1:8000" not in plan
    assert "start here  http://127.0.0.1:9000/  " in plan  # the front door at the port given (issue 53)
    assert "--port 9000" in plan and "--port 50999" in plan
    # IPv6 loopback: a URL authority in brackets.
    assert "advertised  http://[::1]:9001  " in _plan("HOST=::1", "PORT=9001")
    # Set by the operator: kept.
    assert "advertised  https://openwop.example  " in _plan("PORT=9000", OPENWOP_PUBLIC_URL="https://openwop.example")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("public_url", "grpc_port", "grpc_url"),
    [
        ("http://127.0.0.1:9000", "50999", "127.0.0.1:50999"),  # make run PORT=9000 GRPC_PORT=50999
        ("http://[::1]:9001", "50051", "[::1]:50051"),  # make run HOST=::1: a gRPC target in brackets
        ("https://openwop.example", "50051", "openwop.example:50051"),  # an operator's own origin
    ],
)
def test_the_cards_grpc_url_follows_the_public_url_and_grpc_port(
    public_url: str, grpc_port: str, grpc_url: str, tmp_path: Path
) -> None:
    """What `make run` exports (OPENWOP_PUBLIC_URL, OPENWOP_GRPC_PORT) is what settings derive from."""
    env = process_env("grpc-url", tmp_path, OPENWOP_PUBLIC_URL=public_url, OPENWOP_GRPC_PORT=grpc_port)
    env.pop("OPENWOP_GRPC_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import settings as s; "
         "print(s.OPENWOP_PUBLIC_URL, s.OPENWOP_GRPC_URL)"],
        cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "openwop_host.settings"}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [public_url, grpc_url]


def _console_scripts(clone: Path) -> None:
    """What `pip install` writes into .venv/bin and the bare clone venv lacks: celery, uvicorn."""
    python = clone / ".venv/bin/python"
    for name, module in (("celery", "celery.__main__"), ("uvicorn", "uvicorn.main")):
        script = clone / ".venv/bin" / name
        script.write_text(f"#!{python}\nimport sys\nfrom {module} import main\nsys.exit(main())\n")
        script.chmod(0o755)


def _group_commands(pgid: int) -> list[str]:
    """The command lines of the processes in process group `pgid` (from /proc)."""
    commands = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            commands.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip())
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return [command for command in commands if command]


@pytest.fixture
def made_run(transactional_db: None, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, int, int]]:
    _needs_make()
    if not Path("/proc/self/stat").exists():
        pytest.skip("/proc is needed to see make run's processes")
    clone = tmp_path / "openwop-host"
    clone.mkdir()
    _clone(clone)
    _console_scripts(clone)
    port, grpc_port = free_port(), free_port()
    log = (tmp_path / "make-run.log").open("w")
    make = subprocess.Popen(
        ["make", "run", f"PORT={port}", f"GRPC_PORT={grpc_port}"],
        cwd=clone, env={**_clean_env(tmp_path / "home"), "DATABASE_URL": _database_url()},
        stdout=log, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )  # fmt: skip
    try:
        yield make, clone, port, grpc_port
    finally:
        if make.poll() is None or _group_commands(make.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(make.pid, signal.SIGKILL)  # only the group this test started
        make.wait(timeout=30)
        log.close()


def _wait_for(what: str, check: object, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.5)
    tail = log.read_text()[-3000:] if log.exists() else ""
    raise AssertionError(f"{what} within {timeout}s; make run said:\n{tail}")


def test_make_run_signs_its_card_at_its_port_and_runs_beat(
    made_run: tuple[subprocess.Popen[str], Path, int, int], tmp_path: Path
) -> None:
    make, clone, port, grpc_port = made_run
    base = f"http://127.0.0.1:{port}"
    make_log = tmp_path / "make-run.log"

    def card_served() -> bool:
        assert make.poll() is None, make_log.read_text()[-3000:]
        try:
            return httpx.get(f"{base}/.well-known/agent-card.json", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    _wait_for("the card was served", card_served, START_TIMEOUT, make_log)
    card = httpx.get(f"{base}/.well-known/agent-card.json", timeout=10).json()
    interfaces = {i["protocolBinding"]: i["url"] for i in card["supportedInterfaces"]}
    assert interfaces["JSONRPC"].startswith(f"{base}/"), interfaces
    assert interfaces["GRPC"] == f"127.0.0.1:{grpc_port}", interfaces
    assert ":8000" not in json.dumps(card)
    [signature] = card["signatures"]  # make setup activated a key: the card is signed
    assert signature["protected"]
    discovery = httpx.get(f"{base}/.well-known/openwop", timeout=10).text
    assert base in discovery and ":8000" not in discovery

    commands = _group_commands(make.pid)
    assert any("celery -A openwop_host beat" in c for c in commands), commands
    beat_log, worker_log = clone / "var/beat.log", clone / "var/worker.log"
    _wait_for(
        "beat sent the sweeper and the worker ran it",
        lambda: "Sending due task runs-sweep-stale" in (beat_log.read_text() if beat_log.exists() else "")
        and "runs.sweep_stale" in (worker_log.read_text() if worker_log.exists() else ""),
        BEAT_TIMEOUT, make_log,
    )  # fmt: skip

    # Ctrl-C: the terminal signals the whole foreground group; nothing survives it.
    os.killpg(make.pid, signal.SIGINT)
    _wait_for("every make run process ended", lambda: not _group_commands(make.pid), 60, make_log)
    assert make.wait(timeout=10) is not None
