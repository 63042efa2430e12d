"""OPENWOP_EGRESS_ALLOW_HTTP_CIDRS (issue 32, item 6): plain http only to addresses inside the
operator's ranges, at registration and again at connect; every other egress rule unchanged, and
discovery declares it beside the allowlist. Real plain-http receivers on loopback.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from apps.core import egress
from apps.core.egress import (
    REASON_ADDRESS,
    REASON_HOST,
    REASON_SCHEME,
    REASON_USERINFO,
    EgressRefused,
    egress_check_url,
    egress_relaxation,
)
from apps.core.egress_transport import egress_request
from tests.core.https_receivers import Behaviour, Receiver, TcpTrap, http_receiver
from tests.core.test_egress import FakeDns

HEADERS = {"Authorization": "Bearer plain-http-credential", "Content-Type": "application/a2a+json"}


@pytest.fixture(autouse=True)
def dns(monkeypatch: pytest.MonkeyPatch) -> FakeDns:
    fake = FakeDns()
    monkeypatch.setattr(egress, "resolve_host", fake)
    return fake


@pytest.fixture
def receiver(dns: FakeDns) -> Iterator[Receiver]:
    with http_receiver() as live:
        dns.set("plain.test", ["127.0.0.1"])
        yield live


@pytest.fixture
def loopback(settings: Any) -> None:
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.0/8"]


@pytest.fixture
def http_loopback(settings: Any, loopback: None) -> None:
    settings.OPENWOP_EGRESS_ALLOW_HTTP_CIDRS = ["127.0.0.0/8"]


def _refusal(url: str) -> str:
    with pytest.raises(EgressRefused) as refused:
        egress_request("POST", url, headers=HEADERS, content=b"{}")
    return refused.value.reason


@pytest.mark.usefixtures("loopback")
def test_plain_http_is_refused_without_the_range(receiver: Receiver) -> None:
    url = f"http://127.0.0.1:{receiver.port}/webhook"
    with pytest.raises(EgressRefused) as refused:
        egress_check_url(url)
    assert refused.value.reason == REASON_SCHEME
    assert _refusal(url) == REASON_SCHEME
    assert receiver.received == []


@pytest.mark.usefixtures("http_loopback")
def test_plain_http_reaches_a_receiver_inside_the_range(receiver: Receiver) -> None:
    for host in ("127.0.0.1", "plain.test"):
        url = f"http://{host}:{receiver.port}/webhook"
        assert egress_check_url(url).addresses == (ipaddress.ip_address("127.0.0.1"),)
        result = egress_request("POST", url, headers=HEADERS, content=b'{"statusUpdate":{}}')
        assert (result.ok, result.status_code) == (True, 200), host
    assert [seen.headers["Authorization"] for seen in receiver.received] == [HEADERS["Authorization"]] * 2
    assert receiver.received[1].headers["Host"] == f"plain.test:{receiver.port}"


def test_the_http_range_relaxes_only_the_scheme(settings: Any, receiver: Receiver) -> None:
    settings.OPENWOP_EGRESS_ALLOW_HTTP_CIDRS = ["127.0.0.0/8"]
    # The address rules are unchanged: loopback still needs the allowlist.
    assert _refusal(f"http://127.0.0.1:{receiver.port}/") == REASON_ADDRESS
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.0/8", "10.0.0.0/8"]
    for url, reason in [
        ("http://10.1.2.3/", REASON_SCHEME),  # allowed address, but outside the http ranges
        (f"http://localhost:{receiver.port}/", REASON_HOST),
        (f"http://u:p@127.0.0.1:{receiver.port}/", REASON_USERINFO),
        (f"ftp://127.0.0.1:{receiver.port}/", REASON_SCHEME),
    ]:
        with pytest.raises(EgressRefused) as refused:
            egress_check_url(url)
        assert refused.value.reason == reason, url
    assert receiver.received == []


@pytest.mark.usefixtures("loopback")
def test_a_name_that_moves_outside_the_http_range_is_refused_at_connect(
    settings: Any, receiver: Receiver, dns: FakeDns
) -> None:
    settings.OPENWOP_EGRESS_ALLOW_HTTP_CIDRS = ["127.0.0.1/32"]
    trap = TcpTrap("127.0.0.2", receiver.port)
    try:
        dns.set("plain.test", ["127.0.0.1"], ["127.0.0.2"])  # allowed address, but not for http
        assert egress_check_url(f"http://plain.test:{receiver.port}/").addresses
        assert _refusal(f"http://plain.test:{receiver.port}/") == REASON_SCHEME
        assert trap.connections() == 0
    finally:
        trap.close()
    assert receiver.received == []


@pytest.mark.usefixtures("http_loopback")
def test_a_plain_http_redirect_is_still_not_followed(dns: FakeDns) -> None:
    with (
        http_receiver() as target,
        http_receiver(behaviour=Behaviour(status=302, headers={"Location": "http://127.0.0.1:1/steal"})) as receiver,
    ):
        receiver.behaviour.headers["Location"] = f"http://127.0.0.1:{target.port}/steal"
        result = egress_request("POST", f"http://127.0.0.1:{receiver.port}/", headers=HEADERS, content=b"{}")
        assert (result.ok, result.redirected, result.status_code) == (False, True, 302)
        assert "location" not in result.headers
        assert len(receiver.received) == 1 and target.received == []


@pytest.mark.django_db
def test_discovery_declares_the_http_range(settings: Any, client: Client) -> None:
    assert egress_relaxation() is None
    settings.OPENWOP_EGRESS_ALLOW_HTTP_CIDRS = ["127.0.0.1/8"]
    assert egress_relaxation() == {"allowHttpCidrs": ["127.0.0.0/8"]}
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["10.0.0.0/8"]
    doc = client.get("/.well-known/openwop").json()
    assert doc["extensions"]["openwop-host.egress"] == {
        "allowCidrs": ["10.0.0.0/8"],
        "allowHttpCidrs": ["127.0.0.0/8"],
    }
