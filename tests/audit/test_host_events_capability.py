"""Discovery's `hostEvents` record lists every type this host emits with its delivery class."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client, override_settings
from openwop_client._generated import CAPABILITY_FAMILY_KEYS

from apps.audit.host_event_types import host_event_type

pytestmark = pytest.mark.django_db  # other families' records read their settings rows


def _record(client: Client) -> dict[str, Any]:
    response = client.get("/.well-known/openwop")
    assert response.status_code == 200
    doc = json.loads(response.content)
    record = doc["hostEvents"]
    assert "hostEvents" in CAPABILITY_FAMILY_KEYS
    assert record["status"] == "stable" and "until" not in record
    assert record["since"] in doc["protocolVersions"]
    assert record["witness"] == "witnessable-gated"
    assert "supported" not in record
    return record


def test_lists_negotiation_decided_as_durable(client: Client) -> None:
    types = _record(client)["types"]
    assert {"type": "negotiation.decided", "delivery": "durable"} in types
    assert all(set(t) == {"type", "delivery"} for t in types)
    # Listing a host-test type would bind POST /host/events/test, which is off here.
    assert not [t for t in types if t["type"].startswith("host-test.")]


@override_settings(OPENWOP_CONFORMANCE_SEAMS=True)
def test_lists_the_reserved_test_types_while_their_trigger_is_served(client: Client) -> None:
    types = _record(client)["types"]
    assert {"type": "host-test.durable-triggered", "delivery": "durable"} in types
    assert {"type": "host-test.ephemeral-triggered", "delivery": "ephemeral"} in types


@override_settings(OPENWOP_CONFORMANCE_SEAMS=True)
def test_advertised_class_is_the_class_events_are_written_with(client: Client) -> None:
    for entry in _record(client)["types"]:
        assert str(host_event_type(entry["type"]).delivery) == entry["delivery"]
