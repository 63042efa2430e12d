"""`GET /.well-known/openwop`: the closed v2 root, strong ETag, 304 (capabilities.md §1-3)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from django.test import Client
from openwop_client._generated import CAPABILITY_FAMILY_KEYS, CAPABILITY_METADATA_KEYS

from apps.core.discovery import FORBIDDEN_ROOT_KEYS, register_capability
from tests.envelope import SPEC

URL = "/.well-known/openwop"
WITNESSES = {"witnessable-unaided", "witnessable-gated", "seam-gated", "claims-check", "negative-existence"}
pytestmark = pytest.mark.django_db
VERSION_RE = r"^(0|[1-9]\d*)\.(0|[1-9]\d*)$"


def _doc(client: Client) -> dict[str, Any]:
    response = client.get(URL)
    assert response.status_code == 200
    return json.loads(response.content)


def assert_closed_v2_root(doc: dict[str, Any]) -> None:
    allowed = set(CAPABILITY_METADATA_KEYS) | set(CAPABILITY_FAMILY_KEYS)
    assert not FORBIDDEN_ROOT_KEYS & set(doc), "forbidden root keys present"
    for key in doc:
        assert "." not in key
        assert key in allowed, f"{key} is not a root key of the closed v2 document"
    jsonschema.validate(
        doc,
        {
            "type": "object",
            "required": ["protocolVersions", "preferredVersion"],
            "properties": {
                "protocolVersions": {"type": "array", "minItems": 1, "items": {"pattern": VERSION_RE}},
                "preferredVersion": {"type": "string", "pattern": VERSION_RE},
            },
        },
    )
    assert doc["preferredVersion"] in doc["protocolVersions"]
    for family in set(doc) & set(CAPABILITY_FAMILY_KEYS):
        record = doc[family]
        assert record["status"] in {"stable", "experimental", "deprecated"}
        assert record["witness"] in WITNESSES
        assert "supported" not in record
        assert ("until" in record) == (record["status"] != "stable")
        assert record["since"] in doc["protocolVersions"], f"{family}.since names a version this host does not list"


def test_document_is_the_closed_v2_root(client: Client) -> None:
    doc = _doc(client)
    assert_closed_v2_root(doc)
    assert doc["protocolVersion"] == doc["preferredVersion"]
    assert doc["eventLogSchemaVersion"] == 3
    assert doc["implementation"]["name"] == "openwop-host"
    assert isinstance(doc["fixtures"], list)


def test_never_advertises_transports_grpc_profiles_or_supported_flags(client: Client) -> None:
    text = client.get(URL).content.decode()
    for forbidden in ('"supportedTransports"', '"grpc"', '"supported"'):
        assert forbidden not in text
    assert "profiles" not in _doc(client)


def test_auth_record_validates_against_its_facet_schema(client: Client) -> None:
    schema = json.loads((SPEC / "openwop-v2/spec/v2/facets/auth.schema.json").read_text())
    record = _doc(client)["auth"]
    jsonschema.validate({k: v for k, v in record.items() if k not in {"status", "since", "witness"}}, schema)
    assert record["lanes"][0]["lane"] == "api-key"
    assert record["lanes"][0]["revocation"] == "next-request"


def test_no_authentication_needed(client: Client) -> None:
    assert client.get(URL, headers={"Authorization": "Bearer nonsense"}).status_code == 200


def test_strong_etag_and_conditional_get(client: Client) -> None:
    first = client.get(URL)
    etag = first.headers["ETag"]
    assert etag.startswith('"') and not etag.startswith("W/")
    again = client.get(URL, headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["ETag"] == etag
    assert again.headers["OpenWOP-Version"] == first.headers["OpenWOP-Version"]
    assert client.get(URL, headers={"If-None-Match": f'"other", {etag}'}).status_code == 304
    assert client.get(URL, headers={"If-None-Match": f"W/{etag}"}).status_code == 304
    assert client.get(URL, headers={"If-None-Match": '"stale"'}).status_code == 200


def test_bytes_and_etag_change_with_semantics(client: Client) -> None:
    from apps.core import discovery

    original = discovery._capabilities.copy()
    before = client.get(URL)
    try:
        register_capability("replay", lambda: None)  # a builder returning None adds nothing
        assert client.get(URL).headers["ETag"] == before.headers["ETag"]
        register_capability(
            "heartbeat", lambda: {"status": "experimental", "since": "2.0", "until": "2.99", "witness": "claims-check"}
        )
        after = client.get(URL)
        assert after.headers["ETag"] != before.headers["ETag"]
        assert client.get(URL, headers={"If-None-Match": before.headers["ETag"]}).status_code == 200
    finally:
        discovery._capabilities.clear()
        discovery._capabilities.update(original)


@pytest.mark.parametrize("family", ["supportedTransports", "grpc", "profiles", "a2a.supported"])
def test_forbidden_families_cannot_be_registered(family: str) -> None:
    with pytest.raises(ValueError, match="discovery root"):
        register_capability(family, lambda: {})


def test_openapi_document(client: Client) -> None:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    spec = json.loads(response.content)
    assert spec["openapi"].startswith("3.")
    assert "/host/openwop-host/api/whoami" in spec["paths"]


def test_real_client_reads_discovery_from_a_live_host(live_url: str) -> None:
    from openwop_client import OpenwopClient

    caps = OpenwopClient(live_url, api_key="unused").discovery_capabilities()
    assert caps.preferredVersion in caps.protocolVersions
    assert "auth" in caps.families
    assert_closed_v2_root(caps.raw)
