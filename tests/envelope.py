"""Validation of REST error bodies against the vendored OpenWOP envelope schema."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

# The OpenWOP spec subset vendored in the repository (spec/README.md): no test reads outside it.
SPEC = Path(__file__).resolve().parent.parent / "spec"
ENVELOPE_SCHEMA = SPEC / "openwop-v2/schemas/v2/error-envelope.schema.json"


@cache
def envelope_schema() -> dict[str, Any]:
    return json.loads(ENVELOPE_SCHEMA.read_text())


def assert_envelope(response: Any, code: str, status: int) -> dict[str, Any]:
    """The response is exactly the OpenWOP envelope with `code` and `status`; returns the body."""
    assert response.status_code == status, (response.status_code, getattr(response, "content", b"")[:300])
    assert response.headers["Content-Type"].startswith("application/json")
    body = json.loads(response.content)
    jsonschema.validate(body, envelope_schema())
    assert body["error"] == code
    assert "retryAfter" not in json.dumps(body.get("details", {}))
    return body
