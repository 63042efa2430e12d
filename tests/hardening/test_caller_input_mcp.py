"""Black-box, issue 33 items 10, 11 and 13 on the MCP mount (live uvicorn + Celery worker): a NUL
or a number past a double in a tool argument, a prompt name or an MRTR answer is -32602 with the
request id kept (the `mcp` SDK's ClientSession where it sends it, raw httpx for the exact bytes);
a retry carrying a NUL leaves its requestState unspent, so the good retry that follows succeeds
with the same state; request ids are strings or integers only."""

from __future__ import annotations

from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from apps.runs.models import Run
from tests.a2a.live import db_read
from tests.mcp.conftest import routing_headers, rpc
from tests.mcp.sdk_client import mcp_client

pytestmark = pytest.mark.django_db(transaction=True)

NUL = "\x00"


@pytest.fixture
def keys(live_url: str, live_worker, make_key) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"acme": make_key("acme"), "globex": make_key("globex")}


async def _accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"action": "accept"})


def _runs() -> int:
    return Run.unscoped_all_tenants.count()


async def test_nul_and_huge_numbers_through_the_sdk(live_url: str, keys: dict[str, str]) -> None:
    before = await db_read(_runs)
    async with mcp_client(live_url, keys["acme"], elicitation_callback=_accept) as client:
        for arguments in ({"greeting": f"a{NUL}b"}, {f"k{NUL}": 1}, {"nested": [{"deep": NUL}]}):
            with pytest.raises(MCPError) as refused:
                await client.call_tool("echo", arguments)
            assert refused.value.error.code == -32602, arguments
        with pytest.raises(MCPError) as prompt:
            await client.get_prompt(f"greeting{NUL}", {})
        assert prompt.value.error.code == -32602
        assert (await client.call_tool("echo", {"greeting": "hi"})).structured_content == {"greeting": "hi"}
    assert await db_read(_runs) == before + 1  # only the good call started a run


async def test_mrtr_retry_with_a_nul_then_the_good_retry_uses_the_same_state(
    live_url: str, keys: dict[str, str]
) -> None:
    async with mcp_client(live_url, keys["acme"], elicitation_callback=_accept) as client:
        session = client.session
        first = await session.call_tool("conformance-approval", {"n": 7}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult) and first.request_state
        [interrupt_id] = list(first.input_requests or {})

        def answer(comment: str) -> dict[str, types.ElicitResult]:
            content = {"action": "accept", "comment": comment}
            return {interrupt_id: types.ElicitResult(action="accept", content=content)}

        with pytest.raises(MCPError) as refused:
            await session.call_tool(
                "conformance-approval",
                {"n": 7},
                input_responses=answer(f"bad{NUL}"),
                request_state=first.request_state,
                allow_input_required=True,
            )
        assert refused.value.error.code == -32602
        # Cross-tenant: globex presenting acme's state (good answer) is refused and spends nothing.
        async with mcp_client(live_url, keys["globex"]) as theirs:
            with pytest.raises(MCPError) as foreign:
                await theirs.session.call_tool(
                    "conformance-approval",
                    {"n": 7},
                    input_responses=answer("mine now"),
                    request_state=first.request_state,
                    allow_input_required=True,
                )
            assert foreign.value.error.code == -32602
        done = await session.call_tool(
            "conformance-approval",
            {"n": 7},
            input_responses=answer("good"),
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(done, types.CallToolResult) and done.is_error is False, done
        assert done.structured_content == {"approved": True, "action": "accept", "comment": "good"}


async def _post(live_url: str, key: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    sent = {"Authorization": f"Bearer {key}", "Content-Type": "application/json", **(headers or {})}
    async with httpx.AsyncClient(timeout=60) as http:
        return await http.post(f"{live_url}/mcp", json=body, headers=sent)


async def test_raw_answers_keep_the_request_id(live_url: str, keys: dict[str, str]) -> None:
    key = keys["acme"]
    cases = [
        rpc("tools/call", {"name": "echo", "arguments": {"greeting": f"a{NUL}"}}, id="call-ü"),
        rpc("tools/call", {"name": "echo", "arguments": {"n": 10**400}}, id=42),
        rpc("tools/call", {"name": "echo", "arguments": {"n": -(10**309)}}, id=0),
        rpc("prompts/get", {"name": f"p{NUL}"}, id="prompt"),
        rpc("tasks/get", {"taskId": f"acme/{NUL}"}, id=-3),
    ]
    before = await db_read(_runs)
    for body in cases:
        headers = routing_headers(body)
        if NUL in headers.get("Mcp-Name", ""):
            del headers["Mcp-Name"]  # a header cannot carry a NUL; the name is in the body only
        response = await _post(live_url, key, body, headers)
        assert response.status_code == 400, response.text
        answer = response.json()
        assert answer["id"] == body["id"] and answer["error"]["code"] == -32602, answer
    assert await db_read(_runs) == before


@pytest.mark.parametrize("request_id", [{"a": 1}, [1], True, False, 1.5, 1.0, None])
async def test_request_ids_are_strings_or_integers(live_url: str, keys: dict[str, str], request_id: Any) -> None:
    body = rpc("tools/list", id=request_id)
    response = await _post(live_url, keys["acme"], body, routing_headers(body))
    assert response.status_code == 400, response.text
    answer = response.json()
    assert answer["id"] is None and answer["error"]["code"] == -32600, answer
    for served in ("x", 7, 0, -1, 2**53):
        body = rpc("tools/list", id=served)
        response = await _post(live_url, keys["acme"], body, routing_headers(body))
        assert response.status_code == 200 and response.json()["id"] == served, response.text
