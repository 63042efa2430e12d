"""Vendor error codes (spec/v2/core/errors.md: "a registered code, or a vendor code"): each is
`openwop-host.<name>`, matches the vendored registry's `vendorCodePattern`, is not a registered
code, and carries its own HTTP status; the envelope it renders validates against the vendored
schema."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from apps.core.errors import (
    REGISTERED_STATUS,
    VENDOR_CODE_PATTERN,
    VENDOR_ORG,
    VENDOR_STATUS,
    OpenWopError,
    error_status,
    vendor_code,
)
from tests.envelope import SPEC, envelope_schema

REGISTRY = json.loads((SPEC / "openwop-v2/spec/v2/errors.json").read_text())


def test_our_pattern_is_the_registrys() -> None:
    assert VENDOR_CODE_PATTERN.pattern == REGISTRY["vendorCodePattern"]


def test_every_vendor_code_we_emit_is_well_formed_and_not_registered() -> None:
    registered = {row["code"] for row in REGISTRY["rows"]}
    # The peers app registers its codes at import (apps.peers.apps.ready loads its node kinds).
    assert "openwop-host.peer_unreachable" in VENDOR_STATUS
    for code, status in VENDOR_STATUS.items():
        assert re.fullmatch(REGISTRY["vendorCodePattern"], code), code
        assert code.startswith(f"{VENDOR_ORG}.") and code not in registered, code
        assert 400 <= status <= 599 and error_status(code) == status
        assert code not in REGISTERED_STATUS


@pytest.mark.parametrize("code", sorted(VENDOR_STATUS))
def test_a_vendor_code_renders_a_valid_envelope_with_its_status(code: str) -> None:
    class Failure(OpenWopError):
        pass

    Failure.code = code
    error = Failure("The peer failed.", details={"runId": "acme/x"})
    jsonschema.validate(error.envelope(), envelope_schema())
    assert error.status == VENDOR_STATUS[code]


@pytest.mark.parametrize(
    ("name", "status"),
    [("Bad-Name", 502), ("peer.unreachable", 502), ("", 502), ("fine_name", 200), ("fine_name", 600)],
)
def test_a_malformed_vendor_code_fails_at_registration(name: str, status: int) -> None:
    with pytest.raises(ValueError):
        vendor_code(name, status)
    assert f"{VENDOR_ORG}.{name}" not in VENDOR_STATUS


def test_a_vendor_code_cannot_change_its_status() -> None:
    code = vendor_code("peer_unreachable", VENDOR_STATUS["openwop-host.peer_unreachable"])  # idempotent
    with pytest.raises(ValueError, match="twice"):
        vendor_code("peer_unreachable", 500)
    assert VENDOR_STATUS[code] == 502


def test_the_reserved_namespace_and_unknown_codes_have_no_status() -> None:
    assert not VENDOR_CODE_PATTERN.fullmatch("openwop.peer_unreachable")
    assert error_status("peer_unreachable") is None and error_status("cancelled") is None
    assert error_status("interop_version_unsupported") == 400
