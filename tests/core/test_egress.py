"""The egress guard (webhooks.md §Egress, security-defaults.md §Onward hops, interop.md §A2A push delivery).

No test here reaches anything but loopback: DNS is always the fake below (an unknown name does not
resolve), check-time tables never connect, and the live tests talk to HTTPS receivers on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from django.core.exceptions import ImproperlyConfigured

from apps.core import egress
from apps.core.egress import (
    REASON_ADDRESS,
    REASON_HOST,
    REASON_MALFORMED,
    REASON_SCHEME,
    REASON_USERINFO,
    EgressRefused,
    address_refusal,
    egress_addresses,
    egress_check_url,
    egress_relaxation,
    sanitize_url,
)
from apps.core.egress_transport import (
    MAX_BODY_BYTES,
    egress_request,
    egress_transport,
)
from tests.core.https_receivers import Behaviour, Receiver, TcpTrap, https_receiver


class FakeDns:
    """Stands in for `egress.resolve_host`. Each name has a list of answers, used in turn; the last
    one repeats. Unknown names fail like NXDOMAIN, so nothing ever reaches a real resolver."""

    def __init__(self) -> None:
        self.answers: dict[str, list[list[str]]] = {}
        self.calls: list[str] = []

    def set(self, name: str, *answers: list[str]) -> None:
        self.answers[name] = [list(answer) for answer in answers]

    def __call__(self, host: str, port: int) -> list[egress.IPAddress]:
        name = host.rstrip(".")
        self.calls.append(name)
        queue = self.answers.get(name)
        if not queue:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        answer = queue[0] if len(queue) == 1 else queue.pop(0)
        return [ipaddress.ip_address(address) for address in answer]


PUBLIC_V4 = "93.184.216.34"
PUBLIC_V6 = "2606:4700::6810:84e5"


@pytest.fixture(autouse=True)
def dns(monkeypatch: pytest.MonkeyPatch, settings: Any) -> FakeDns:
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = []
    settings.OPENWOP_EGRESS_CA_BUNDLE = ""
    settings.OPENWOP_EGRESS_HOSTS_FILE = os.devnull  # this machine's hosts file never decides a case
    fake = FakeDns()
    fake.set("hooks.example.com", [PUBLIC_V4])
    fake.set("v6.example.com", [PUBLIC_V6])
    fake.set("dual.example.com", [PUBLIC_V4, PUBLIC_V6])
    fake.set("xn--bcher-kva.example", [PUBLIC_V4])
    fake.set("internal.example.com", ["10.0.0.5"])
    fake.set("mixed.example.com", [PUBLIC_V4, "127.0.0.1"])
    fake.set("mixed6.example.com", [PUBLIC_V6, "::ffff:127.0.0.1"])
    fake.set("imds.example.com", ["169.254.169.254"])
    fake.set("cgnat.example.com", ["100.64.0.1"])
    fake.set("ula.example.com", ["fd00::1"])
    fake.set("nat64.example.com", ["64:ff9b::7f00:1"])
    fake.set("linklocal6.example.com", ["fe80::1%2"])
    monkeypatch.setattr(egress, "resolve_host", fake)
    return fake


# --- check time: the hostile table -------------------------------------------------------------------

HOSTILE: list[tuple[str, str]] = [
    # scheme
    ("http://hooks.example.com/", REASON_SCHEME),
    ("ftp://hooks.example.com/", REASON_SCHEME),
    ("HTTP://hooks.example.com/", REASON_SCHEME),
    ("wss://hooks.example.com/", REASON_SCHEME),
    ("javascript:alert(1)", REASON_MALFORMED),
    ("//hooks.example.com/", REASON_MALFORMED),
    ("https:hooks.example.com", REASON_MALFORMED),
    # userinfo and parser-confusion tricks
    ("https://user:pass@hooks.example.com/", REASON_USERINFO),
    ("https://hooks.example.com@127.0.0.1/", REASON_USERINFO),
    ("https://@hooks.example.com/", REASON_USERINFO),
    ("https://127.0.0.1#@hooks.example.com/", REASON_MALFORMED),
    ("https://hooks.example.com#@127.0.0.1", REASON_MALFORMED),
    ("https://127.0.0.1\\@hooks.example.com/", REASON_MALFORMED),
    ("https://hooks.example.com\\@127.0.0.1/", REASON_MALFORMED),
    (" https://hooks.example.com/", REASON_MALFORMED),
    ("https://hooks.example.com /", REASON_MALFORMED),
    ("https://hooks.exa\tmple.com/", REASON_MALFORMED),
    ("https://hooks.example.com/\r\nX-Injected: 1", REASON_MALFORMED),
    ("https://hooks.exa\u200bmple.com/", REASON_MALFORMED),
    ("https://hooks.example.com\x00.evil/", REASON_MALFORMED),
    ("https:///hook", REASON_MALFORMED),
    ("https://:443/", REASON_MALFORMED),
    ("https://hooks.example.com:/", REASON_MALFORMED),
    ("https://hooks.example.com:0/", REASON_MALFORMED),
    ("https://hooks.example.com:65536/", REASON_MALFORMED),
    ("https://hooks.example.com:443:443/", REASON_MALFORMED),
    ("https://hooks.example.com:+443/", REASON_MALFORMED),
    ("https://%6c%6f%63%61%6c%68%6f%73%74/", REASON_MALFORMED),
    ("https://a..example.com/", REASON_MALFORMED),
    ("https://xn--a.example.com/", REASON_MALFORMED),
    ("https://-bad-.example.com/", REASON_MALFORMED),
    ("https://[::ffff:127.0.0.1/", REASON_MALFORMED),
    ("https://[v1.fe80::a]/", REASON_MALFORMED),
    ("https://[::1]x/", REASON_MALFORMED),
    ("https://1.2.3.4.5/", REASON_MALFORMED),
    ("https://256.1.1.1/", REASON_MALFORMED),
    ("https://4294967296/", REASON_MALFORMED),
    ("https://09.1.1.1/", REASON_MALFORMED),
    # names
    ("https://localhost/", REASON_HOST),
    ("https://LOCALHOST/", REASON_HOST),
    ("https://localhost./", REASON_HOST),
    ("https://localhost:8443/hook", REASON_HOST),
    ("https://foo.localhost/", REASON_HOST),
    ("https://localhost.localdomain/", REASON_HOST),
    ("https://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/", REASON_HOST),  # fullwidth
    ("https://metadata.google.internal/computeMetadata/v1/", REASON_HOST),
    ("https://metadata.goog/", REASON_HOST),
    ("https://metadata/", REASON_HOST),
    ("https://instance-data/", REASON_HOST),
    ("https://db.internal/", REASON_HOST),
    ("https://printer.local/", REASON_HOST),
    ("https://nas.home.arpa/", REASON_HOST),
    # IPv4 literals in every spelling
    ("https://127.0.0.1/", REASON_ADDRESS),
    ("https://127.0.0.1:8443/", REASON_ADDRESS),
    ("https://127.0.0.1./", REASON_ADDRESS),
    ("https://2130706433/", REASON_ADDRESS),
    ("https://0177.0.0.1/", REASON_ADDRESS),
    ("https://0177.1/", REASON_ADDRESS),
    ("https://017700000001/", REASON_ADDRESS),
    ("https://0x7f.1/", REASON_ADDRESS),
    ("https://0x7f000001/", REASON_ADDRESS),
    ("https://0x7F.0x0.0x0.0x1/", REASON_ADDRESS),
    ("https://127.1/", REASON_ADDRESS),
    ("https://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11/", REASON_ADDRESS),  # fullwidth
    ("https://0.0.0.0/", REASON_ADDRESS),
    ("https://0/", REASON_ADDRESS),
    ("https://10.0.0.1/", REASON_ADDRESS),
    ("https://172.16.0.1/", REASON_ADDRESS),
    ("https://172.31.255.255/", REASON_ADDRESS),
    ("https://192.168.1.1/", REASON_ADDRESS),
    ("https://169.254.169.254/latest/meta-data/", REASON_ADDRESS),
    ("https://100.64.0.1/", REASON_ADDRESS),
    ("https://100.100.100.200/", REASON_ADDRESS),  # Alibaba metadata, inside CGNAT
    ("https://192.0.0.192/", REASON_ADDRESS),
    ("https://192.0.2.1/", REASON_ADDRESS),
    ("https://198.51.100.7/", REASON_ADDRESS),
    ("https://203.0.113.9/", REASON_ADDRESS),
    ("https://198.18.0.1/", REASON_ADDRESS),
    ("https://224.0.0.1/", REASON_ADDRESS),
    ("https://239.255.255.250/", REASON_ADDRESS),
    ("https://240.0.0.1/", REASON_ADDRESS),
    ("https://255.255.255.255/", REASON_ADDRESS),
    # IPv6 literals and IPv4 embedded in IPv6
    ("https://[::1]/", REASON_ADDRESS),
    ("https://[::]/", REASON_ADDRESS),
    ("https://[0:0:0:0:0:0:0:1]/", REASON_ADDRESS),
    ("https://[::ffff:127.0.0.1]/", REASON_ADDRESS),
    ("https://[::ffff:7f00:1]/", REASON_ADDRESS),
    ("https://[0:0:0:0:0:ffff:127.0.0.1]/", REASON_ADDRESS),
    ("https://[::ffff:10.0.0.1]/", REASON_ADDRESS),
    ("https://[::ffff:169.254.169.254]/", REASON_ADDRESS),
    ("https://[::ffff:0:127.0.0.1]/", REASON_ADDRESS),  # SIIT IPv4-translated
    ("https://[::127.0.0.1]/", REASON_ADDRESS),  # IPv4-compatible
    ("https://[::a00:1]/", REASON_ADDRESS),
    ("https://[64:ff9b::7f00:1]/", REASON_ADDRESS),  # NAT64 of 127.0.0.1
    ("https://[64:ff9b::10.1.2.3]/", REASON_ADDRESS),
    ("https://[64:ff9b::a9fe:a9fe]/", REASON_ADDRESS),
    ("https://[64:ff9b:1::808:808]/", REASON_ADDRESS),  # local-use NAT64
    ("https://[2002:7f00:1::]/", REASON_ADDRESS),  # 6to4 of 127.0.0.1
    ("https://[2002:a9fe:a9fe::1]/", REASON_ADDRESS),  # 6to4 of 169.254.169.254
    ("https://[2002:c0a8:101::1]/", REASON_ADDRESS),  # 6to4 of 192.168.1.1
    ("https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", REASON_ADDRESS),  # Teredo
    ("https://[fd00::1]/", REASON_ADDRESS),
    ("https://[fd00:ec2::254]/", REASON_ADDRESS),  # AWS IMDS over IPv6
    ("https://[fc00::1]/", REASON_ADDRESS),
    ("https://[fe80::1]/", REASON_ADDRESS),
    ("https://[fe80::1%25eth0]/", REASON_HOST),
    ("https://[fec0::1]/", REASON_ADDRESS),
    ("https://[ff02::1]/", REASON_ADDRESS),
    ("https://[2001:db8::1]/", REASON_ADDRESS),
    ("https://[3fff::1]/", REASON_ADDRESS),
    ("https://[100::1]/", REASON_ADDRESS),
    ("https://[4000::1]/", REASON_ADDRESS),
    # names whose DNS answers are forbidden (the fake resolver)
    ("https://internal.example.com/", REASON_ADDRESS),
    ("https://mixed.example.com/", REASON_ADDRESS),
    ("https://mixed6.example.com/", REASON_ADDRESS),
    ("https://imds.example.com/", REASON_ADDRESS),
    ("https://cgnat.example.com/", REASON_ADDRESS),
    ("https://ula.example.com/", REASON_ADDRESS),
    ("https://nat64.example.com/", REASON_ADDRESS),
    ("https://linklocal6.example.com/", REASON_ADDRESS),
    ("https://nxdomain.example.com/", REASON_ADDRESS),
]


def _id(url: str) -> str:
    return url.encode("unicode_escape").decode("ascii")[:60]


def test_the_hostile_table_is_big_enough() -> None:
    assert len(HOSTILE) >= 40
    assert len({url for url, _ in HOSTILE}) == len(HOSTILE)


@pytest.mark.parametrize(("url", "reason"), HOSTILE, ids=[_id(url) for url, _ in HOSTILE])
def test_hostile_url_is_refused_at_check_time(url: str, reason: str) -> None:
    with pytest.raises(EgressRefused) as refused:
        egress_check_url(url)
    assert refused.value.reason == reason
    assert refused.value.code == "webhook_url_rejected"
    assert refused.value.status == 400
    assert refused.value.envelope()["details"] == {"reason": reason}


LITERAL_HOSTS = [
    "127.0.0.1",
    "2130706433",
    "0177.0.0.1",
    "0x7f.1",
    "127.1",
    "0",
    "::ffff:127.0.0.1",
    "::ffff:7f00:1",
    "64:ff9b::7f00:1",
    "2002:7f00:1::",
    "::127.0.0.1",
    "169.254.169.254",
    "fe80::1%25eth0",
]


@pytest.mark.parametrize("host", LITERAL_HOSTS)
def test_connect_time_check_refuses_the_host_httpx_would_connect_to(host: str) -> None:
    # What the pinned backends receive is httpx's parse of the URL (`raw_host`), not our string.
    # httpx itself rejects some spellings (`0177.0.0.1`); those never reach a socket at all.
    bracketed = f"[{host}]" if ":" in host else host
    spellings = [host]
    with contextlib.suppress(httpx.InvalidURL):
        spellings.append(httpx.URL(f"https://{bracketed}/").raw_host.decode("ascii"))
    for spelling in spellings:
        with pytest.raises(EgressRefused):
            egress_addresses(spelling, 443)


GOOD: list[tuple[str, tuple[str, ...]]] = [
    ("https://hooks.example.com/a2a/push?tenant=x", (PUBLIC_V4,)),
    ("https://Hooks.Example.COM:8443/hook", (PUBLIC_V4,)),
    ("HTTPS://hooks.example.com/", (PUBLIC_V4,)),
    ("https://hooks.example.com./hook", (PUBLIC_V4,)),
    ("https://v6.example.com/", (PUBLIC_V6,)),
    ("https://dual.example.com/", (PUBLIC_V4, PUBLIC_V6)),
    ("https://b\u00fccher.example/hook", (PUBLIC_V4,)),
    ("https://8.8.8.8/", ("8.8.8.8",)),
    ("https://[2606:4700::1]:8443/", ("2606:4700::1",)),
    ("https://[::ffff:8.8.8.8]/", ("::ffff:808:808",)),
    ("https://[64:ff9b::808:808]/", ("64:ff9b::808:808",)),
    ("https://[2002:808:808::1]/", ("2002:808:808::1",)),
]


@pytest.mark.parametrize(("url", "addresses"), GOOD, ids=[_id(url) for url, _ in GOOD])
def test_public_destination_is_accepted(url: str, addresses: tuple[str, ...]) -> None:
    target = egress_check_url(url)
    assert tuple(str(address) for address in target.addresses) == addresses


def test_check_without_resolution_does_not_touch_dns(dns: FakeDns) -> None:
    target = egress_check_url("https://nxdomain.example.com:9443/x", resolve=False)
    assert (target.host, target.port, target.addresses) == ("nxdomain.example.com", 9443, ())
    assert dns.calls == []


def test_embedded_ipv4_is_judged_by_the_ipv4_inside() -> None:
    for public in ["::ffff:8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::", "::8.8.8.8"]:
        assert address_refusal(ipaddress.ip_address(public)) is None
    for private in ["::ffff:192.168.0.1", "64:ff9b::192.168.0.1", "2002:c0a8:1::", "::192.168.0.1"]:
        assert "private" in (address_refusal(ipaddress.ip_address(private)) or "")


def test_refusal_message_never_echoes_the_url() -> None:
    url = "https://alice:hunter2@hooks.example.com/p?token=s3cret"
    with pytest.raises(EgressRefused) as refused:
        egress_check_url(url)
    rendered = repr(refused.value.envelope()) + str(refused.value) + refused.value.log_detail
    for secret in ("hunter2", "s3cret", "alice"):
        assert secret not in rendered


def test_dns_failure_and_forbidden_answer_look_the_same_to_the_caller() -> None:
    messages = set()
    for url in ["https://nxdomain.example.com/", "https://internal.example.com/"]:
        with pytest.raises(EgressRefused) as refused:
            egress_check_url(url)
        messages.add((refused.value.reason, refused.value.message))
    assert len(messages) == 1


# --- the operator allowlist -----------------------------------------------------------------------


def test_allowlist_admits_only_its_ranges(settings: Any) -> None:
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["10.0.0.0/8", "fd00::/8"]
    assert egress_check_url("https://10.1.2.3/").addresses == (ipaddress.ip_address("10.1.2.3"),)
    assert egress_check_url("https://internal.example.com/").addresses
    assert egress_check_url("https://[::ffff:10.0.0.1]/").addresses
    assert egress_check_url("https://ula.example.com/").addresses
    for url, reason in [
        ("https://127.0.0.1/", REASON_ADDRESS),
        ("https://192.168.1.1/", REASON_ADDRESS),
        ("https://0.0.0.0/", REASON_ADDRESS),
        ("http://10.1.2.3/", REASON_SCHEME),
        ("https://localhost/", REASON_HOST),
        ("https://u:p@10.1.2.3/", REASON_USERINFO),
    ]:
        with pytest.raises(EgressRefused) as refused:
            egress_check_url(url)
        assert refused.value.reason == reason, url


def test_relaxation_is_described_only_when_set(settings: Any) -> None:
    assert egress_relaxation() is None
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.1/8", "fd00::/8"]
    assert egress_relaxation() == {"allowCidrs": ["127.0.0.0/8", "fd00::/8"]}


def test_a_malformed_allowlist_fails_closed(settings: Any) -> None:
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["10.0.0.0/8", "not-a-cidr"]
    with pytest.raises(ImproperlyConfigured):
        egress_check_url("https://hooks.example.com/")


# --- log-safe URLs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://user:pw@Hooks.Example.com:8443/a/b?token=x#frag", "https://hooks.example.com:8443/a/b"),
        ("https://hooks.example.com@127.0.0.1/x?q=1", "https://127.0.0.1/x"),
        ("https://[::1]:9/p?a=b", "https://[::1]:9/p"),
        ("https://h.example/a b\r\nInjected: 1?q", "https://h.example/a%20bInjected:%201"),
        ("https://h.example/\u00e9\x1b[31m", "https://h.example/%C3%A9%1B%5B31m"),
        ("not a url", "<unparseable url>"),
        ("https://h.example:notaport/", "<unparseable url>"),
    ],
)
def test_sanitize_url(url: str, expected: str) -> None:
    assert sanitize_url(url) == expected


# --- live HTTPS receivers on loopback ------------------------------------------------------------------


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def ca_bundle(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(tmp_path_factory.mktemp("egress-ca")) / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture
def trusted(settings: Any, ca_bundle: str) -> None:
    settings.OPENWOP_EGRESS_CA_BUNDLE = ca_bundle


@pytest.fixture
def loopback_allowed(settings: Any) -> None:
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.0/8"]


@pytest.fixture
def receiver(ca: trustme.CA, dns: FakeDns) -> Iterator[Receiver]:
    with https_receiver(ca, "receiver.test") as live:
        dns.set("receiver.test", ["127.0.0.1"])
        yield live


@pytest.fixture
def redirect_target(ca: trustme.CA, dns: FakeDns) -> Iterator[Receiver]:
    with https_receiver(ca, "target.test") as live:
        dns.set("target.test", ["127.0.0.1"])
        yield live


def _url(receiver: Receiver, path: str = "/hook") -> str:
    return f"https://receiver.test:{receiver.port}{path}"


PUSH_HEADERS = {"Authorization": "Bearer push-credential-7f3a", "Content-Type": "application/a2a+json"}


@pytest.mark.usefixtures("trusted", "loopback_allowed")
def test_delivery_keeps_host_and_sni_and_verifies_the_name(receiver: Receiver) -> None:
    result = egress_request(
        "POST",
        _url(receiver, "/hook?x=1"),
        headers={**PUSH_HEADERS, "Host": "spoofed.example"},
        content=b'{"statusUpdate":{}}',
    )
    assert (result.ok, result.status_code, result.redirected, result.error) == (True, 200, False, None)
    assert result.body == b"ok"
    [seen] = receiver.received
    assert seen.method == "POST" and seen.path == "/hook?x=1"
    assert seen.headers["Host"] == f"receiver.test:{receiver.port}"
    assert seen.headers["Authorization"] == "Bearer push-credential-7f3a"
    assert seen.body == b'{"statusUpdate":{}}'
    assert receiver.sni_names == ["receiver.test"]


@pytest.mark.usefixtures("trusted", "loopback_allowed")
def test_a_certificate_for_another_name_fails(ca: trustme.CA, dns: FakeDns) -> None:
    with https_receiver(ca, "other.test") as impostor:
        dns.set("receiver.test", ["127.0.0.1"])
        result = egress_request("POST", _url(impostor), headers=PUSH_HEADERS, content=b"{}")
    assert (result.ok, result.status_code, result.error) == (False, None, "tls")
    assert impostor.received == []


@pytest.mark.usefixtures("loopback_allowed")
def test_the_test_ca_is_not_trusted_without_the_bundle(receiver: Receiver) -> None:
    result = egress_request("POST", _url(receiver), headers=PUSH_HEADERS, content=b"{}")
    assert result.error == "tls"
    assert receiver.received == []


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.usefixtures("trusted", "loopback_allowed")
def test_a_redirect_is_a_failed_attempt_and_never_followed(
    status: int, receiver: Receiver, redirect_target: Receiver
) -> None:
    receiver.behaviour.status = status
    receiver.behaviour.headers = {"Location": f"https://target.test:{redirect_target.port}/steal"}
    result = egress_request("POST", _url(receiver), headers=PUSH_HEADERS, content=b"{}")
    assert (result.ok, result.redirected, result.status_code) == (False, True, status)
    assert "location" not in result.headers
    assert len(receiver.received) == 1
    assert redirect_target.received == [] and redirect_target.sni_names == []


@pytest.mark.usefixtures("trusted", "loopback_allowed")
def test_a_client_configured_to_follow_still_cannot(receiver: Receiver, redirect_target: Receiver) -> None:
    receiver.behaviour.status = 307
    receiver.behaviour.headers = {"Location": f"https://target.test:{redirect_target.port}/steal"}
    with httpx.Client(transport=egress_transport(), follow_redirects=True) as client:
        response = client.post(_url(receiver), headers=PUSH_HEADERS, content=b"{}")
    assert response.status_code == 307
    assert redirect_target.received == []


@pytest.mark.usefixtures("trusted")
def test_loopback_receiver_is_refused_without_the_allowlist(receiver: Receiver) -> None:
    with pytest.raises(EgressRefused) as refused:
        egress_request("POST", _url(receiver), headers=PUSH_HEADERS, content=b"{}")
    assert refused.value.reason == REASON_ADDRESS
    assert receiver.received == [] and receiver.sni_names == []


@pytest.mark.usefixtures("trusted")
def test_dns_rebinding_between_registration_and_delivery_is_refused(
    receiver: Receiver, dns: FakeDns, settings: Any
) -> None:
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.1/32"]
    trap = TcpTrap("127.0.0.2", receiver.port)
    try:
        dns.set("receiver.test", ["127.0.0.1"], ["127.0.0.2"])
        assert egress_check_url(_url(receiver)).addresses == (ipaddress.ip_address("127.0.0.1"),)
        with pytest.raises(EgressRefused):
            egress_request("POST", _url(receiver), headers=PUSH_HEADERS, content=b"{}")
        assert trap.connections() == 0
    finally:
        trap.close()
    assert receiver.received == []


@pytest.mark.usefixtures("trusted", "loopback_allowed")
def test_the_connection_goes_to_the_checked_address_not_a_fresh_lookup(
    receiver: Receiver, dns: FakeDns, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Our resolver answers 127.0.0.1 once, then 127.0.0.2 (also allowed here, so only the pin can
    # keep us off it). The system resolver is rigged to send the name to the trap too: any second
    # lookup between check and connect, ours or the socket layer's, would land there.
    trap = TcpTrap("127.0.0.2", receiver.port)
    dns.set("receiver.test", ["127.0.0.1"], ["127.0.0.2"])
    real_getaddrinfo = socket.getaddrinfo

    def rigged(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.rstrip(".") == "receiver.test":
            return real_getaddrinfo("127.0.0.2", *args, **kwargs)
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rigged)
    try:
        result = egress_request("POST", _url(receiver), headers=PUSH_HEADERS, content=b"{}", timeout=5)
        assert result.ok
        assert trap.connections() == 0
    finally:
        trap.close()
    assert len(receiver.received) == 1
    assert dns.calls == ["receiver.test"]


@pytest.mark.usefixtures("trusted", "loopback_allowed")
def test_a_hanging_receiver_times_out(ca: trustme.CA, dns: FakeDns) -> None:
    with https_receiver(ca, "receiver.test", behaviour=Behaviour(hang=True)) as hung:
        dns.set("receiver.test", ["127.0.0.1"])
        result = egress_request("POST", _url(hung), headers=PUSH_HEADERS, content=b"{}", timeout=0.5)
    assert (result.ok, result.status_code, result.error) == (False, None, "timeout")
    assert len(hung.received) == 1


@pytest.mark.usefixtures("trusted", "loopback_allowed")
def test_the_response_body_read_is_capped(receiver: Receiver) -> None:
    receiver.behaviour.body = b"x" * (3 * MAX_BODY_BYTES)
    result = egress_request("GET", _url(receiver), headers={})
    assert result.ok and result.body_truncated
    assert len(result.body) == MAX_BODY_BYTES


SECRETS = ("push-credential-7f3a", "query-secret-91c2")


@pytest.mark.parametrize("path", ["refused", "redirect", "server-error", "timeout", "untrusted-tls"])
def test_credentials_never_reach_the_logs(
    path: str,
    receiver: Receiver,
    redirect_target: Receiver,
    settings: Any,
    ca_bundle: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    if path != "refused":
        settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.0/8"]
    if path != "untrusted-tls":
        settings.OPENWOP_EGRESS_CA_BUNDLE = ca_bundle
    if path == "redirect":
        receiver.behaviour.status = 302
        receiver.behaviour.headers = {"Location": f"https://target.test:{redirect_target.port}/"}
    elif path == "server-error":
        receiver.behaviour.status = 500
    elif path == "timeout":
        receiver.behaviour.hang = True
    url = _url(receiver, "/hook?token=query-secret-91c2")
    try:
        result = egress_request("POST", url, headers=PUSH_HEADERS, content=b"{}", timeout=0.5)
        assert not result.ok
        rendered = repr(result)
    except EgressRefused as refused:
        assert path == "refused"
        rendered = repr(refused) + str(refused.envelope())
    captured = caplog.text + rendered
    assert "receiver.test" in caplog.text  # the sanitised URL is what was logged
    for secret in SECRETS:
        assert secret not in captured


# --- the transports for httpx clients --------------------------------------------------------------------


@pytest.mark.usefixtures("trusted", "loopback_allowed")
def test_sync_transport_refuses_before_sending(receiver: Receiver) -> None:
    with httpx.Client(transport=egress_transport(), follow_redirects=False) as client:
        for url, reason in [
            (f"http://receiver.test:{receiver.port}/", REASON_SCHEME),
            (f"https://u:p@receiver.test:{receiver.port}/", REASON_USERINFO),
            (f"https://localhost:{receiver.port}/", REASON_HOST),
        ]:
            with pytest.raises(EgressRefused) as refused:
                client.get(url)
            assert refused.value.reason == reason
        assert client.get(_url(receiver)).status_code == 200
    assert len(receiver.received) == 1


def test_a_url_httpx_would_read_differently_is_refused_before_any_io(dns: FakeDns) -> None:
    # Our grammar maps fullwidth letters to `example.com` (UTS 46); httpx refuses the same text.
    with pytest.raises(EgressRefused) as refused:
        egress_request("POST", "https://\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com/", headers={})
    assert refused.value.reason == REASON_MALFORMED
    assert dns.calls == []


@pytest.mark.usefixtures("trusted", "loopback_allowed")
def test_a_caller_chosen_sni_name_is_ignored(receiver: Receiver) -> None:
    with httpx.Client(transport=egress_transport()) as client:
        response = client.get(_url(receiver), extensions={"sni_hostname": "other.test"})
    assert response.status_code == 200
    assert receiver.sni_names == ["receiver.test"]
