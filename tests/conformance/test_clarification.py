"""The `conformance-clarification*` fixtures (RFC 0199 §D.2): a flat primitive question is asked by
MCP form elicitation and its answer completes the run; a nested or a sensitive (format password)
question is never a form, whatever the client declared."""

from __future__ import annotations

import json

import pytest

from apps.runs.engine import run_advance
from apps.runs.models import Run
from tests.door_client import DoorClient
from tests.mcp.conftest import McpCaller

pytestmark = pytest.mark.django_db

FORM_ONLY = {"elicitation": {}}  # an empty elicitation capability is form mode only
FORM_AND_URL = {"elicitation": {"form": {}, "url": {}}}


def _modes(result: dict) -> list[str]:  # type: ignore[type-arg]
    return [request["params"].get("mode") for request in (result.get("inputRequests") or {}).values()]


def test_a_flat_question_is_a_form_elicitation_and_its_answer_completes(acme: McpCaller) -> None:
    first = acme.call("tools/call", {"name": "conformance-clarification", "arguments": {}}, capabilities=FORM_ONLY)
    result = first.json()["result"]
    assert result["resultType"] == "input_required" and _modes(result) == ["form"]
    [(key, request)] = result["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    assert request["params"]["requestedSchema"] == {
        "type": "object", "properties": {"q1": {"type": "string"}}, "required": ["q1"],
    }  # fmt: skip
    assert "What colour" in request["params"]["message"]
    retry = acme.call(
        "tools/call",
        {"name": "conformance-clarification", "arguments": {}, "requestState": result["requestState"],
         "inputResponses": {key: {"action": "accept", "content": {"q1": "blue"}}}},
        capabilities=FORM_ONLY,
    )  # fmt: skip
    done = retry.json()["result"]
    assert done["resultType"] == "complete" and done.get("isError") is not True
    assert done["structuredContent"]["answers"] == {"q1": "blue"}


@pytest.mark.parametrize("fixture", ["conformance-clarification-nested", "conformance-clarification-sensitive"])
@pytest.mark.parametrize("capabilities", [FORM_ONLY, FORM_AND_URL])
def test_a_nested_or_sensitive_question_is_never_a_form(acme: McpCaller, fixture: str, capabilities: dict) -> None:  # type: ignore[type-arg]
    response = acme.call("tools/call", {"name": fixture, "arguments": {}}, capabilities=capabilities)
    body = response.json()
    assert "error" not in body, body  # a result, never a JSON-RPC error
    assert "form" not in _modes(body["result"])
    assert body["result"]["isError"] is True  # this host has no resolve page for it: a tool error


def test_the_rest_door_resolves_the_question_by_its_node_id(acme: McpCaller) -> None:
    created = DoorClient().post(
        "/runs", data=json.dumps({"workflowId": "conformance-clarification"}), content_type="application/json",
        headers={"Authorization": f"Bearer {acme.key}"},
    ).json()  # fmt: skip
    run_advance(run_id=created["runId"], worker="test-worker")
    assert Run.unscoped_all_tenants.get(run_id=created["runId"]).status == "waiting-input"
    answered = DoorClient().post(
        f"/runs/{created['runId'].replace('/', '~2F')}/interrupts/ask",
        data=json.dumps({"resumeValue": {"q1": "blue"}}), content_type="application/json",
        headers={"Authorization": f"Bearer {acme.key}"},
    )  # fmt: skip
    assert answered.status_code == 200, answered.content
