"""Issue 33 item 7: a development host (DJANGO_DEBUG=1) answers loopback callers only, however it was
started. uvicorn serves the host with DEBUG on, listening on every address as `make run HOST=0.0.0.0`
would; a caller reaching it over this machine's non-loopback address (sending `Host: localhost`,
which any caller can) gets a plain 403 and no DEBUG page; a loopback caller still gets the DEBUG
404 page, as a developer expects."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.live import ROOT, WEB_SERVER_ARGS, LiveProcess, process_env

UNKNOWN_PATH = "/console/no-such-page-for-the-debug-404"
TECHNICAL_404 = "Using the URLconf defined in"


def _non_loopback_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.123", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@pytest.fixture
def debug_host_on_every_address(transactional_db: None, tmp_path: Path) -> Iterator[int]:
    """The host on the test database, as `make run` starts it but with DEBUG on every address."""
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen(64)
    port = int(listener.getsockname()[1])
    env = process_env("debug-loopback", tmp_path, DJANGO_DEBUG="1", OPENWOP_ENV_FILE=str(tmp_path / "absent.env"))
    log_path = tmp_path / "web.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "openwop_host.asgi:application", "--fd", str(listener.fileno()),
         *WEB_SERVER_ARGS],
        cwd=ROOT, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT, pass_fds=(listener.fileno(),),
    )  # fmt: skip
    listener.close()
    live = LiveProcess(proc=proc, log_path=log_path)
    deadline = time.monotonic() + 60
    try:
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the DEBUG host did not start:\n{live.log()}")
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield port
    finally:
        live.stop()


def test_a_debug_host_answers_only_loopback_callers(debug_host_on_every_address: int) -> None:
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to call the host from")
    port = debug_host_on_every_address

    remote = httpx.get(f"http://{address}:{port}{UNKNOWN_PATH}", headers={"Host": "localhost"}, timeout=10)
    assert remote.status_code == 403
    assert remote.text == "This development host (DJANGO_DEBUG=1) answers loopback callers only.\n"
    # Every door, not only Django's pages: the A2A and MCP paths are served in front of Django.
    for path in ("/.well-known/agent-card.json", "/mcp", "/admin/login/"):
        assert httpx.get(f"http://{address}:{port}{path}", headers={"Host": "localhost"}, timeout=10).status_code == 403

    local = httpx.get(f"http://127.0.0.1:{port}{UNKNOWN_PATH}", timeout=10)
    assert local.status_code == 404 and TECHNICAL_404 in local.text  # DEBUG, for this machine
