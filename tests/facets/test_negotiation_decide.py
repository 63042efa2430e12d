"""The decision table of interop.md §Negotiation is a protocol (pure function, no database)."""

from __future__ import annotations

import hashlib

import pytest

from apps.facets.negotiation import decide, negotiation_payload, peer_origin_digest

A2A = {"protocol": "a2a", "offered": ["0.3", "0.9", "1.0"], "preferred": "1.0", "floor": "0.9"}
MCP = {
    "protocol": "mcp",
    "offered": ["2025-06-18", "2025-11-25", "2026-07-28"],
    "preferred": "2026-07-28",
    "floor": "2025-11-25",
}


def _a2a(requested, *, authenticated=True, peer_offers=None):  # type: ignore[no-untyped-def]
    return decide(**A2A, requested=requested, peer_offers=peer_offers, authenticated=authenticated)  # type: ignore[arg-type]


def test_requested_equals_preferred_is_accepted() -> None:
    d = _a2a("1.0")
    assert (d.outcome, d.version, d.requested, d.reason) == ("accepted", "1.0", "1.0", "ok")


def test_none_named_serves_preferred() -> None:
    d = _a2a(None)
    assert (d.outcome, d.version, d.requested) == ("accepted", "1.0", None)
    assert decide(**MCP, requested=None, peer_offers=None, authenticated=False).version == "2026-07-28"  # type: ignore[arg-type]


def test_between_floor_and_preferred_authenticated_is_accepted_at_that_version() -> None:
    d = _a2a("0.9")
    assert (d.outcome, d.version) == ("accepted", "0.9")


def test_between_floor_and_preferred_unauthenticated_is_refused() -> None:
    d = _a2a("0.9", authenticated=False)
    assert (d.outcome, d.reason, d.version) == ("refused", "unauthenticated", None)


def test_unauthenticated_at_preferred_is_fine() -> None:
    assert _a2a("1.0", authenticated=False).accepted


@pytest.mark.parametrize("authenticated", [True, False])
def test_below_floor_fails_closed_even_when_offered(authenticated: bool) -> None:
    d = _a2a("0.3", authenticated=authenticated)  # 0.3 is in the offered list, but under the floor
    assert (d.outcome, d.reason, d.floor) == ("refused", "below-floor", "0.9")


@pytest.mark.parametrize("requested", ["2.0", "1.1", "banana", "1", ""])
def test_unknown_or_malformed_version_is_unsupported(requested: str) -> None:
    d = _a2a(requested)
    assert (d.outcome, d.reason) == ("refused", "unsupported")
    assert d.supported == ("0.3", "0.9", "1.0")


def test_mcp_revisions_order_as_dates() -> None:
    below = decide(**MCP, requested="2025-06-18", peer_offers=None, authenticated=True)  # type: ignore[arg-type]
    assert below.reason == "below-floor"
    between = decide(**MCP, requested="2025-11-25", peer_offers=None, authenticated=True)  # type: ignore[arg-type]
    assert (between.outcome, between.version) == ("accepted", "2025-11-25")


def test_outbound_downgrade_is_accepted_with_a_version_other_than_requested() -> None:
    # We ask for preferred; the peer only offers an older version above our floor.
    d = _a2a("1.0", peer_offers=["0.9", "0.3"])
    assert (d.outcome, d.requested, d.version) == ("accepted", "1.0", "0.9")


def test_outbound_peer_only_below_floor_is_below_floor() -> None:
    d = _a2a("1.0", peer_offers=["0.3"])
    assert (d.outcome, d.reason) == ("refused", "below-floor")


def test_outbound_no_common_version_is_unsupported() -> None:
    assert _a2a("1.0", peer_offers=["7.0"]).reason == "unsupported"


def test_outbound_unauthenticated_never_downgrades() -> None:
    assert _a2a("1.0", peer_offers=["0.9"], authenticated=False).reason == "unauthenticated"


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://Peer.Example.com/a2a/jsonrpc?x=1", "https://peer.example.com"),
        ("https://peer.example.com:443/", "https://peer.example.com"),
        ("http://127.0.0.1:8080/mcp", "http://127.0.0.1:8080"),
        ("https://[::1]:9443/x", "https://[::1]:9443"),
    ],
)
def test_peer_digest_is_sha256_of_the_origin(url: str, origin: str) -> None:
    assert peer_origin_digest(url) == hashlib.sha256(origin.encode()).hexdigest()


def test_payload_is_content_free_and_carries_requested() -> None:
    digest = peer_origin_digest("https://secret-peer.example.org/a2a")
    payload = negotiation_payload(_a2a("0.9"), peer_digest=digest)
    assert payload["requested"] == "0.9" and payload["version"] == "0.9" and payload["outcome"] == "accepted"
    assert payload["peerDigest"] == digest
    assert set(payload) <= {"protocol", "outcome", "version", "requested", "floor", "reason", "peerDigest", "at"}
    assert "secret-peer" not in repr(payload)
    refused = negotiation_payload(_a2a("0.3"), peer_digest=digest)
    assert "version" not in refused and refused["reason"] == "below-floor" and refused["requested"] == "0.3"
