"""Checks that what we put on the wire is what the spec and the real client accept."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from openwop_client.client import _event_from_dict, _run_snapshot_from_dict
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parents[2] / "spec/openwop-v2/schemas/v2"


@cache
def _event_validator() -> jsonschema.Draft202012Validator:
    registry: Registry = Registry()
    for name in ("run-event.schema.json", "ids.schema.json"):
        schema = json.loads((SCHEMAS / name).read_text())
        registry = registry.with_resource(schema["$id"], Resource.from_contents(schema))
    root = json.loads((SCHEMAS / "run-event.schema.json").read_text())
    # The vendored `type` is oneOf [registered enum, vendor pattern], but every registered type also
    # matches the vendor pattern, so a strict oneOf refuses all of them. We require the enum instead.
    registered = root["properties"]["type"]["oneOf"][0]
    root["properties"]["type"] = registered
    return jsonschema.Draft202012Validator(root, registry=registry)


def assert_event_doc(doc: dict[str, Any]) -> None:
    """A RunEventDoc valid against run-event.schema.json, and parsed by openwop-client."""
    _event_validator().validate(doc)
    parsed = _event_from_dict(doc)
    assert parsed.sequence == doc["sequence"] and parsed.type == doc["type"]


def assert_snapshot_doc(doc: dict[str, Any]) -> None:
    parsed = _run_snapshot_from_dict(doc)
    assert parsed.runId == doc["runId"]
    assert parsed.owner.subject.tenant == parsed.owner.tenant
