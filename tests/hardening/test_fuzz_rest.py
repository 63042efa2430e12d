"""schemathesis against the host's own `/openapi.json`, sent over real HTTP to a live uvicorn:
positive and negative cases for every REST operation, with the properties of the protocol doors
(tests/hardening/hostile.py) plus the REST one: every error is the OpenWOP envelope."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import httpx
import jsonschema
import pytest
import requests
import schemathesis
from hypothesis import given, note
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode

from apps.runs.models import Run
from tests.envelope import envelope_schema
from tests.hardening.hostile import (
    FUZZ_EXAMPLES,
    TRACE_MARKERS,
    fuzz_settings,
    json_values,
    state_counts,
    weird_text,
)

pytestmark = pytest.mark.django_db(transaction=True)

# Paths that are not the REST wire (their own errors, tested elsewhere) or that stream forever.
NOT_REST = ("/a2a", "/mcp", "/.well-known/agent-card.json", "/host/events")


def test_schemathesis_against_the_rest_surface(live_url: str, door_for) -> None:  # type: ignore[no-untyped-def]
    key = door_for("acme").key
    door_for("globex")
    openapi = httpx.get(f"{live_url}/openapi.json").json()
    openapi["paths"] = {p: ops for p, ops in openapi["paths"].items() if not p.startswith(NOT_REST)}
    schema = schemathesis.openapi.from_dict(openapi)
    cases = st.one_of(
        schema.as_strategy(generation_mode=GenerationMode.POSITIVE),
        schema.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )
    session, seen, slow = requests.Session(), Counter[int](), list[tuple[float, str, str]]()
    auth_headers = st.sampled_from([{"Authorization": f"Bearer {key}"}] * 4 + [{}, {"Authorization": "Bearer owk_x.y"}])

    @fuzz_settings(80)
    @given(case=cases, auth=auth_headers)
    def property_(case: Any, auth: dict[str, str]) -> None:
        started = time.monotonic()
        before = state_counts()
        note(case.as_curl_command())
        try:
            response = case.call(base_url=live_url, session=session, headers=auth, timeout=15)
        except requests.exceptions.InvalidHeader:  # a header requests itself refuses to send
            return
        seen[response.status_code] += 1
        slow.append((round(time.monotonic() - started, 2), case.method, case.formatted_path))
        headers = {name.lower(): value for name, value in response.headers.items()}
        text = response.text
        assert response.status_code < 500, (response.status_code, text[:500])
        assert not any(marker in text for marker in TRACE_MARKERS), text[:800]
        if response.status_code >= 400:
            body = json.loads(response.content)
            jsonschema.validate(body, envelope_schema())
            if not case.formatted_path.startswith("/host/openwop-host/"):  # the vendor API is unstamped
                assert headers.get("openwop-version"), headers
            if response.status_code == 429:
                assert headers.get("retry-after"), headers
            assert state_counts() == before, (response.status_code, body)

    property_()
    print(f"fuzz rest: {sum(seen.values())} requests, statuses {dict(sorted(seen.items()))}")
    print("slowest:", sorted(slow, reverse=True)[:5])
    assert sum(seen.values()) >= min(FUZZ_EXAMPLES or 80, 80) * 0.8
    assert any(status < 300 for status in seen) and any(status >= 400 for status in seen)


def test_hostile_json_on_the_rest_writes(live_url: str, live_worker, door_for) -> None:  # type: ignore[no-untyped-def]
    """schemathesis draws from the schema; these bodies come from the protocol doors' hostile values
    (tests/hardening/hostile.py: NUL, strings past their columns, numbers past a double) on the
    REST writes that store caller values, over real HTTP: a 4xx envelope or a success, never a 5xx."""
    from django.db import connection

    key = door_for("acme").key
    headers = {"Authorization": f"Bearer {key}"}
    seen = Counter[int]()
    with httpx.Client(base_url=live_url, headers=headers, timeout=30) as client:
        waiting = client.post("/runs", json={"workflowId": "conformance-approval"}).json()["statusUrl"]

        @fuzz_settings(80, fuzz_cap=2000)
        @given(
            workflow=st.sampled_from(["echo", "conformance-noop"]) | weird_text,
            inputs=st.dictionaries(weird_text, json_values, max_size=4),
            node=st.sampled_from(["approve", "%00", "a" * 200, "x%00y"]),
            resume=json_values,
        )
        def property_(workflow: str, inputs: dict[str, Any], node: str, resume: Any) -> None:
            runs_before = Run.unscoped_all_tenants.count()  # events move on: earlier runs still progress
            for method, path, body in (
                ("POST", "/runs", {"workflowId": workflow, "inputs": inputs}),
                ("POST", f"{waiting}/interrupts/{node}", {"resumeValue": resume}),
            ):
                note(f"{method} {path} {body!r}"[:600])
                sent = json.dumps(body).encode()
                response = client.request(method, path, content=sent, headers={"Content-Type": "application/json"})
                seen[response.status_code] += 1
                assert response.status_code < 500, (path, response.text[:500])
                if response.status_code >= 400:
                    jsonschema.validate(response.json(), envelope_schema())
                    if path == "/runs":
                        assert Run.unscoped_all_tenants.count() == runs_before, response.text[:300]

        property_()
    statuses = dict(sorted(seen.items()))
    print(f"fuzz rest writes on {connection.vendor}: {sum(seen.values())} requests, statuses {statuses}")
    assert any(status < 300 for status in seen) and any(status == 400 for status in seen)
