"""Every egress attempt has an overall deadline (issue 33, item 15): connect, TLS, headers and body
together, not only each read. Real HTTPS receivers on loopback that drip one byte at a time, each
well within the per-read timeout: without the deadline the attempt lasts as long as they drip.

Counted, not timed: each test asserts how the attempt ended and that the receiver was still
dripping when the client hung up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from apps.core import egress
from apps.core.egress_transport import egress_request
from tests.core.drip_receivers import DripStats, dripping_proxy, dripping_receiver
from tests.core.https_receivers import https_receiver
from tests.core.test_egress import FakeDns
from tests.live import wait_until

PER_READ = httpx.Timeout(5.0)  # every dripped byte comes far sooner than this
DEADLINE = 1.0
HEADERS = {"Authorization": "Bearer drip-credential", "Content-Type": "application/a2a+json"}


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(autouse=True)
def dns(monkeypatch: pytest.MonkeyPatch, settings: Any, ca: trustme.CA, tmp_path: Path) -> FakeDns:
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    settings.OPENWOP_EGRESS_CA_BUNDLE = str(bundle)
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.0/8"]  # loopback receivers, these tests only
    fake = FakeDns()
    fake.set("drip.test", ["127.0.0.1"])
    monkeypatch.setattr(egress, "resolve_host", fake)
    return fake


def _hung_up(stats: DripStats) -> None:
    # The receiver notices the closed connection on its next dripped byte.
    wait_until(lambda: stats.hung_up == 1, "the receiver to see the client hang up", timeout=10)
    assert stats.connections == 1


def test_dripped_headers_end_the_attempt_at_its_deadline(ca: trustme.CA) -> None:
    with dripping_receiver(ca, "drip.test", phase="headers") as drip:
        result = egress_request(
            "POST",
            f"https://drip.test:{drip.port}/hook",
            headers=HEADERS,
            content=b"{}",
            timeout=PER_READ,
            deadline_seconds=DEADLINE,
        )
        assert (result.ok, result.status_code, result.error) == (False, None, "timeout")
        assert len(drip.stats.requests) == 1  # the request went out; its answer never finished
        _hung_up(drip.stats)


def test_a_dripped_body_ends_at_the_deadline_with_the_status_kept(ca: trustme.CA) -> None:
    with dripping_receiver(ca, "drip.test", phase="body") as drip:
        result = egress_request(
            "POST",
            f"https://drip.test:{drip.port}/hook",
            headers=HEADERS,
            content=b"{}",
            timeout=PER_READ,
            deadline_seconds=DEADLINE,
        )
        # The status line is the receiver's answer; the body is diagnostics, cut where the deadline fell.
        assert (result.ok, result.status_code, result.body_truncated) == (True, 200, True)
        assert len(result.body) < 1000000
        _hung_up(drip.stats)


def test_a_dripped_tls_handshake_ends_at_the_deadline(ca: trustme.CA) -> None:
    with https_receiver(ca, "drip.test") as receiver, dripping_proxy(receiver.port) as drip:
        # CPython bounds a handshake by the connect timeout; make that longer than the drip, so
        # only the attempt's deadline can end it.
        result = egress_request(
            "POST",
            f"https://drip.test:{drip.port}/hook",
            headers=HEADERS,
            content=b"{}",
            timeout=httpx.Timeout(5.0, connect=60.0),
            deadline_seconds=DEADLINE,
        )
        assert (result.ok, result.status_code, result.error) == (False, None, "timeout")
        assert receiver.received == []  # the handshake never finished: nothing was sent
        _hung_up(drip.stats)


def test_the_default_deadline_follows_the_timeouts(ca: trustme.CA) -> None:
    """A caller naming no deadline still gets one: what its per-operation timeouts allow."""
    with dripping_receiver(ca, "drip.test", phase="headers") as drip:
        result = egress_request(
            "POST",
            f"https://drip.test:{drip.port}/hook",
            headers=HEADERS,
            content=b"{}",
            timeout=httpx.Timeout(0.5, connect=0.5),
        )
        assert result.error == "timeout"
        _hung_up(drip.stats)
