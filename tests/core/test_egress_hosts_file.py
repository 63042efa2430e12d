"""The egress guard and the operator's hosts file (issue 19 point 4).

Names resolve absolute (a trailing dot) so a resolver search list never completes them into an
internal name; names the hosts file lists exactly (Docker `extra_hosts`, Kubernetes `hostAliases`)
get the file's addresses, each checked against the rules and `OPENWOP_EGRESS_ALLOW_CIDRS` as any
DNS answer is. `socket.getaddrinfo` is replaced by a resolver with a search list, so nothing here
reaches a real resolver and the search-list hole is played for real.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from apps.core import egress
from apps.core.egress import REASON_ADDRESS, REASON_HOST, EgressRefused, egress_addresses, egress_check_url
from apps.core.egress_transport import egress_request
from tests.core.https_receivers import https_receiver

SEARCH_DOMAIN = "svc.cluster.local"
# What the search list would complete: `receiver` -> receiver.svc.cluster.local, an internal service.
INTERNAL_ZONE = {f"receiver.{SEARCH_DOMAIN}": "10.96.0.7", f"peer.ns.{SEARCH_DOMAIN}": "10.96.0.8"}
PUBLIC_ZONE = {"hooks.example.com": "93.184.216.34"}
REAL_GETADDRINFO = socket.getaddrinfo


class SearchListResolver:
    """getaddrinfo as glibc with `search svc.cluster.local` and `ndots:5`: a relative name is tried
    with the search domain first; an absolute one (trailing dot) only as written. The hosts file is
    NOT consulted for absolute names, as glibc does not match `name.` against hosts entries."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        try:  # the transport connecting to an address it was given: no name involved
            ipaddress.ip_address(host)
            return REAL_GETADDRINFO(host, port, *args, **kwargs)
        except ValueError:
            pass
        self.asked.append(host)
        zone = {**INTERNAL_ZONE, **PUBLIC_ZONE}
        candidates = [host[:-1]] if host.endswith(".") else [f"{host}.{SEARCH_DOMAIN}", host]
        for name in candidates:
            if name in zone:
                return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (zone[name], port))]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


@pytest.fixture
def hosts_file(tmp_path: Path, settings: Any) -> Path:
    path = tmp_path / "hosts"
    path.write_text(
        "127.0.0.1\tlocalhost\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        "# Docker extra_hosts / Kubernetes hostAliases:\n"
        "10.20.0.5\tpushsink pushsink.corp.example  # the operator's receiver\n"
        "192.168.7.9\tpeer.partner.example\n"
        "10.20.0.6\tsplit.corp.example\n"
        "127.0.0.1\tsplit.corp.example\n"
        "127.0.0.1\tloopsink\n"
    )
    settings.OPENWOP_EGRESS_HOSTS_FILE = str(path)
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = []
    return path


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch, hosts_file: Path) -> SearchListResolver:
    fake = SearchListResolver()
    monkeypatch.setattr(egress.socket, "getaddrinfo", fake)
    return fake


def _refusal(host: str) -> EgressRefused:
    with pytest.raises(EgressRefused) as caught:
        egress_addresses(host, 443)
    return caught.value


def test_a_hosts_file_name_inside_the_allowlist_is_accepted(resolver: SearchListResolver, settings: Any) -> None:
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["10.20.0.0/16", "192.168.7.0/24"]
    assert [str(a) for a in egress_addresses("pushsink.corp.example", 443)] == ["10.20.0.5"]
    assert [str(a) for a in egress_addresses("PEER.partner.example.", 443)] == ["192.168.7.9"]
    # Docker's extra_hosts names are often one label: the exact hosts-file entry is the operator's.
    assert [str(a) for a in egress_addresses("pushsink", 443)] == ["10.20.0.5"]
    target = egress_check_url("https://pushsink:8443/hook")
    assert (target.host, target.port, [str(a) for a in target.addresses]) == ("pushsink", 8443, ["10.20.0.5"])
    assert resolver.asked == []  # the file answered; DNS was never asked


def test_a_hosts_file_name_outside_the_allowlist_is_refused(resolver: SearchListResolver, settings: Any) -> None:
    refused = _refusal("pushsink.corp.example")  # 10.20.0.5 is private and no allowlist is set
    assert refused.reason == REASON_ADDRESS and "10.20.0.5" in refused.log_detail
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["10.30.0.0/16"]
    assert _refusal("pushsink").reason == REASON_ADDRESS
    assert _refusal("peer.partner.example").reason == REASON_ADDRESS


def test_every_hosts_file_address_is_checked(resolver: SearchListResolver, settings: Any) -> None:
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["10.20.0.0/16"]
    refused = _refusal("split.corp.example")  # 10.20.0.6 allowed, but its 127.0.0.1 line is not
    assert refused.reason == REASON_ADDRESS and "127.0.0.1" in refused.log_detail


def test_the_search_list_case_is_still_refused(resolver: SearchListResolver, settings: Any) -> None:
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["10.20.0.0/16"]  # even with an allowlist set
    # `receiver` is in no hosts file: only the search domain would complete it (to 10.96.0.7).
    refused = _refusal("receiver")
    assert refused.reason == REASON_HOST and "single-label" in refused.log_detail
    with pytest.raises(EgressRefused):
        egress_check_url("https://receiver/hook", resolve=False)
    # Two labels: the resolver is asked only for the absolute name, which does not exist.
    refused = _refusal("peer.ns")
    assert refused.reason == REASON_ADDRESS and "does not resolve" in refused.log_detail
    assert resolver.asked == ["peer.ns."]
    # A search-list completion of a hosts-file name is not the name: only exact entries match.
    assert _refusal("corp.example").reason == REASON_ADDRESS
    assert _refusal("pushsink.corp").reason == REASON_ADDRESS


def test_names_outside_the_hosts_file_still_resolve_absolute(resolver: SearchListResolver) -> None:
    assert [str(a) for a in egress_addresses("hooks.example.com", 443)] == ["93.184.216.34"]
    assert resolver.asked == ["hooks.example.com."]


def test_the_name_policy_still_applies_to_hosts_file_names(resolver: SearchListResolver, settings: Any) -> None:
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.0/8", "::1/128"]
    assert _refusal("localhost").reason == REASON_HOST  # a denied name whatever the file says
    assert [str(a) for a in egress_addresses("ip6-localhost", 443)] == ["::1"]  # the allowlist names ::1
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = []
    assert _refusal("ip6-localhost").reason == REASON_ADDRESS


def test_a_missing_hosts_file_means_no_hosts_file_names(resolver: SearchListResolver, settings: Any) -> None:
    settings.OPENWOP_EGRESS_HOSTS_FILE = "/nonexistent/hosts"
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["10.20.0.0/16"]
    assert _refusal("pushsink").reason == REASON_HOST
    assert _refusal("pushsink.corp.example").reason == REASON_ADDRESS


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def loopsink(ca: trustme.CA, tmp_path: Path, settings: Any, resolver: SearchListResolver) -> Iterator[int]:
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    settings.OPENWOP_EGRESS_CA_BUNDLE = str(bundle)
    with https_receiver(ca, "loopsink") as live:
        yield live.port


def test_a_push_to_a_hosts_file_name_is_delivered_through_the_pinned_transport(loopsink: int, settings: Any) -> None:
    headers = {"Content-Type": "application/json"}
    with pytest.raises(EgressRefused) as caught:  # loopback, no allowlist: refused before sending
        egress_request("POST", f"https://loopsink:{loopsink}/hook", headers=headers, content=b"{}")
    assert caught.value.reason == REASON_ADDRESS
    settings.OPENWOP_EGRESS_ALLOW_CIDRS = ["127.0.0.1/32"]
    result = egress_request("POST", f"https://loopsink:{loopsink}/hook", headers=headers, content=b"{}")
    assert (result.ok, result.status_code, result.error) == (True, 200, None)
