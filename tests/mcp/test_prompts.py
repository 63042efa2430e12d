"""Black-box: prompts/list, prompts/get and completion/complete through the `mcp` SDK client (and raw
httpx where bytes matter) against a live uvicorn on loopback."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from mcp.shared.exceptions import MCPError

from apps.agents.fixture_prompts import FIXTURE_PROMPTS
from apps.agents.models import Agent
from apps.agents.services import agent_create, agent_publish, prompt_create
from apps.mcp.prompts import PROMPTS_PAGE_SIZE
from apps.tenants.models import Tenant
from tests.mcp.conftest import rpc
from tests.mcp.sdk_client import mcp_client

pytestmark = pytest.mark.django_db(transaction=True)

INVALID_PARAMS = -32602
GREETING_MESSAGES = [
    {"role": "user", "content": {"type": "text", "text": "Hello {{who}}, you are {{mood}}. {{who}}!"}},
    {"role": "assistant", "content": {"type": "text", "text": "Noted: {{mood}}"}},
]
GREETING_ARGUMENTS = [
    {"name": "who", "description": "Whom to greet", "required": True, "values": ["Alice", "alfred", "Bob"]},
    {"name": "mood", "description": "How they feel"},
]


@pytest.fixture
def key(live_url: str, make_key) -> str:  # type: ignore[no-untyped-def]
    return make_key("acme")  # the tenant-created hook seeds the fixture prompts on commit


@pytest.fixture
def globex_key(live_url: str, make_key) -> str:  # type: ignore[no-untyped-def]
    return make_key("globex")


def _create_prompts(slug: str, prompts: list[dict[str, Any]]) -> None:
    try:
        tenant = Tenant.objects.get(slug=slug)
        for prompt in prompts:
            prompt_create(tenant=tenant, **prompt)
    finally:
        connection.close()  # ran in sync_to_async's worker thread: leave no session behind


async def _seed(slug: str, prompts: list[dict[str, Any]]) -> None:
    await sync_to_async(_create_prompts)(slug, prompts)


def _greeting(name: str = "greeting") -> dict[str, Any]:
    return {
        "name": name,
        "title": "Greeting",
        "description": "Greets someone.",
        "arguments": GREETING_ARGUMENTS,
        "messages": GREETING_MESSAGES,
    }


def _post(live_url: str, key: str, method: str, params: dict[str, Any], *, id: int) -> httpx.Response:
    body = rpc(method, params, id=id, capabilities={})
    headers = {"Authorization": f"Bearer {key}", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
    if "name" in params:
        headers["Mcp-Name"] = params["name"]
    return httpx.post(f"{live_url}/mcp", content=json.dumps(body), headers=headers, timeout=30)


async def test_list_pages_every_prompt_by_name_with_caching_hints(live_url: str, key: str) -> None:
    extra = [
        {
            "name": f"p-{i:03d}",
            "description": f"Prompt {i}",
            "messages": [GREETING_MESSAGES[1]],
            "arguments": [{"name": "mood"}],
        }
        for i in range(PROMPTS_PAGE_SIZE)
    ]
    await _seed("acme", [_greeting(), *extra])
    expected = sorted([*FIXTURE_PROMPTS, "greeting", *(p["name"] for p in extra)])

    seen: list[str] = []
    pages = 0
    async with mcp_client(live_url, key) as client:
        cursor: str | None = None
        while True:
            page = await client.list_prompts(cursor=cursor, cache_mode="refresh")
            pages += 1
            assert page.ttl_ms > 0 and page.cache_scope == "private"
            assert len(page.prompts) <= PROMPTS_PAGE_SIZE
            seen += [p.name for p in page.prompts]
            cursor = page.next_cursor
            if cursor is None:
                break
    assert seen == expected and pages == 2

    greeting = await _raw_list_entry(live_url, key, "greeting")
    assert greeting == {
        "name": "greeting",
        "title": "Greeting",
        "description": "Greets someone.",
        "arguments": [  # completion values stay on the host
            {"name": "who", "description": "Whom to greet", "required": True},
            {"name": "mood", "description": "How they feel"},
        ],
    }
    refused = _post(live_url, key, "prompts/list", {"cursor": "not-ours"}, id=9)
    assert refused.json()["error"]["code"] == INVALID_PARAMS


async def _raw_list_entry(live_url: str, key: str, name: str) -> dict[str, Any]:
    response = await sync_to_async(_post)(live_url, key, "prompts/list", {}, id=3)
    result = response.json()["result"]
    assert result["cacheScope"] == "private" and isinstance(result["ttlMs"], int)
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "openwop-host"
    [entry] = [p for p in result["prompts"] if p["name"] == name]
    return entry


async def test_get_renders_arguments_and_the_fixtures(live_url: str, key: str) -> None:
    await _seed("acme", [_greeting()])
    async with mcp_client(live_url, key) as client:
        result = await client.get_prompt("greeting", {"who": "Ada", "mood": "curious"})
        assert result.description == "Greets someone."
        assert [(m.role, m.content.text) for m in result.messages] == [  # type: ignore[union-attr]
            ("user", "Hello Ada, you are curious. Ada!"),
            ("assistant", "Noted: curious"),
        ]
        optional_left_out = await client.get_prompt("greeting", {"who": "Ada"})
        assert optional_left_out.messages[1].content.text == "Noted: "  # type: ignore[union-attr]

        simple = await client.get_prompt("test_simple_prompt")
        assert simple.messages[0].content.text == "This is a simple prompt for testing."  # type: ignore[union-attr]
        args = await client.get_prompt("test_prompt_with_arguments", {"arg1": "hello", "arg2": "world"})
        assert args.messages[0].content.text == "Prompt with arguments: arg1='hello', arg2='world'"  # type: ignore[union-attr]
        embedded = await client.get_prompt("test_prompt_with_embedded_resource", {"resourceUri": "test://x"})
        resource = embedded.messages[0].content
        assert isinstance(resource, types.EmbeddedResource) and str(resource.resource.uri) == "test://x"
        image = await client.get_prompt("test_prompt_with_image")
        assert isinstance(image.messages[0].content, types.ImageContent)
        assert image.messages[0].content.mime_type == "image/png"


async def test_argument_values_are_inserted_verbatim_never_evaluated(live_url: str, key: str) -> None:
    await _seed("acme", [_greeting()])
    hostile = "{{7*7}} {{mood}} {% if x %}yes{% endif %} ${7*7} {{who}}"
    async with mcp_client(live_url, key) as client:
        result = await client.get_prompt("greeting", {"who": hostile, "mood": "{{who}}"})
    assert result.messages[0].content.text == (  # type: ignore[union-attr]
        f"Hello {hostile}, you are {{{{who}}}}. {hostile}!"
    )
    assert result.messages[1].content.text == "Noted: {{who}}"  # type: ignore[union-attr]


async def test_argument_errors_are_invalid_params(live_url: str, key: str) -> None:
    await _seed("acme", [_greeting()])
    async with mcp_client(live_url, key) as client:
        with pytest.raises(MCPError) as missing:
            await client.get_prompt("greeting", {"mood": "fine"})
        assert missing.value.error.code == INVALID_PARAMS and "who" in missing.value.error.message
        with pytest.raises(MCPError) as unknown:
            await client.get_prompt("greeting", {"who": "Ada", "shoe": "size"})
        assert unknown.value.error.code == INVALID_PARAMS and "shoe" in unknown.value.error.message
    non_string = _post(live_url, key, "prompts/get", {"name": "greeting", "arguments": {"who": 7}}, id=4)
    assert non_string.json()["error"]["code"] == INVALID_PARAMS


async def test_another_tenants_prompt_is_byte_identical_to_an_unknown_one(
    live_url: str, key: str, globex_key: str
) -> None:
    await _seed("acme", [_greeting("acme-only")])
    globex = globex_key
    own = _post(live_url, key, "prompts/get", {"name": "acme-only", "arguments": {"who": "x"}}, id=1)
    assert own.status_code == 200 and "result" in own.json()

    def answer(name: str, id: int) -> tuple[int, bytes]:
        response = _post(live_url, globex, "prompts/get", {"name": name, "arguments": {"who": "x"}}, id=id)
        return response.status_code, response.content

    foreign_status, foreign = answer("acme-only", 7)
    unknown_status, unknown = answer("nobody-has-this", 8)
    assert foreign_status == unknown_status
    assert json.loads(foreign)["error"]["code"] == INVALID_PARAMS
    assert json.loads(foreign)["id"] == 7 and json.loads(unknown)["id"] == 8
    assert _without_id(foreign, 7) == _without_id(unknown, 8)

    # completion/complete on the same refs: one answer too.
    def complete(name: str, id: int) -> bytes:
        params = {"ref": {"type": "ref/prompt", "name": name}, "argument": {"name": "who", "value": "a"}}
        return _post(live_url, globex, "completion/complete", params, id=id).content

    foreign_ref, unknown_ref = complete("acme-only", 7), complete("nobody-has-this", 8)
    assert json.loads(foreign_ref)["error"]["code"] == INVALID_PARAMS
    assert _without_id(foreign_ref, 7) == _without_id(unknown_ref, 8)


def _without_id(body: bytes, id: int) -> bytes:
    """The raw response bytes with the one JSON-RPC id member blanked (everything else compared)."""
    blanked, count = re.subn(rb'"id":\s*' + str(id).encode() + rb"(?=[,}])", b'"id":null', body)
    assert count == 1, body
    return blanked


async def test_completion_of_a_prompt_argument(live_url: str, key: str) -> None:
    await _seed("acme", [_greeting()])
    ref = types.PromptReference(type="ref/prompt", name="greeting")
    async with mcp_client(live_url, key) as client:
        al = await client.complete(ref, {"name": "who", "value": "AL"})
        assert al.completion.values == ["Alice", "alfred"]
        assert al.completion.total == 2 and al.completion.has_more is False
        everyone = await client.complete(ref, {"name": "who", "value": ""})
        assert everyone.completion.values == ["Alice", "alfred", "Bob"]
        none = await client.complete(ref, {"name": "mood", "value": "x"})
        assert none.completion.values == [] and none.completion.total == 0
        conformance = await client.complete(
            types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"),
            {"name": "arg1", "value": "par"},
        )
        assert conformance.completion.values == ["paris", "park", "party"]
        with pytest.raises(MCPError) as unknown_argument:
            await client.complete(ref, {"name": "shoe", "value": ""})
        assert unknown_argument.value.error.code == INVALID_PARAMS
        with pytest.raises(MCPError) as unknown_prompt:
            await client.complete(types.PromptReference(type="ref/prompt", name="nope"), {"name": "who", "value": ""})
        assert unknown_prompt.value.error.code == INVALID_PARAMS
        with pytest.raises(MCPError) as unknown_template:
            await client.complete(
                types.ResourceTemplateReference(type="ref/resource", uri="nothing://{here}"),
                {"name": "here", "value": ""},
            )
        assert unknown_template.value.error.code == INVALID_PARAMS


async def test_completion_caps_values_at_one_hundred(live_url: str, key: str) -> None:
    many = _greeting("many")
    many["arguments"] = [{"name": "who", "values": [f"v{i:03d}" for i in range(150)]}, {"name": "mood"}]
    await _seed("acme", [many])
    async with mcp_client(live_url, key) as client:
        result = await client.complete(
            types.PromptReference(type="ref/prompt", name="many"), {"name": "who", "value": "V"}
        )
    assert result.completion.values == [f"v{i:03d}" for i in range(100)]
    assert result.completion.total == 150 and result.completion.has_more is True


def _agent_with_prompt(slug: str) -> Agent:
    try:
        tenant = Tenant.objects.get(slug=slug)
        agent = agent_create(tenant=tenant, actor="t", agent_id="helper", persona="Hal", roster=["echo"])
        prompt_create(tenant=tenant, agent=agent, **_greeting("helper-greeting"))
        return agent
    finally:
        connection.close()


def _publish(agent: Agent) -> None:
    try:
        agent_publish(agent=agent, actor="t")
    finally:
        connection.close()


async def test_a_prompt_of_an_unpublished_agent_is_invisible_until_it_is_published(live_url: str, key: str) -> None:
    agent = await sync_to_async(_agent_with_prompt)("acme")

    async def names() -> list[str]:
        async with mcp_client(live_url, key) as client:
            return [prompt.name for prompt in (await client.list_prompts()).prompts]

    assert "helper-greeting" not in await names()
    hidden = _post(live_url, key, "prompts/get", {"name": "helper-greeting", "arguments": {"who": "x"}}, id=3)
    unknown = _post(live_url, key, "prompts/get", {"name": "nobody-has-this", "arguments": {"who": "x"}}, id=4)
    assert _without_id(hidden.content, 3) == _without_id(unknown.content, 4)
    await sync_to_async(_publish)(agent)
    assert "helper-greeting" in await names()
    shown = _post(live_url, key, "prompts/get", {"name": "helper-greeting", "arguments": {"who": "x"}}, id=5)
    assert shown.json()["result"]["messages"][0]["content"]["text"].startswith("Hello x,")


async def _ask_context(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    assert isinstance(params, types.ElicitRequestFormParams)
    assert params.requested_schema["required"] == ["context"]
    return types.ElicitResult(action="accept", content={"context": "{{7*7}} stays text"})


async def test_a_missing_required_argument_is_asked_for_when_the_client_can_answer(live_url: str, key: str) -> None:
    async with mcp_client(live_url, key, elicitation_callback=_ask_context) as client:
        prompt = await client.get_prompt("test_input_required_result_prompt")  # the SDK answers the form
    assert prompt.messages[0].content.text == "Answer with this context in mind: {{7*7}} stays text"  # type: ignore[union-attr]
    # By hand: the first answer is an InputRequiredResult with the form; the retry renders.
    params = {"name": "test_input_required_result_prompt", "arguments": {}}
    body = rpc("prompts/get", params, id=1, capabilities={"elicitation": {"form": {}}})
    headers = {
        "Authorization": f"Bearer {key}",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "prompts/get",
        "Mcp-Name": "test_input_required_result_prompt",
    }
    first = httpx.post(f"{live_url}/mcp", json=body, headers=headers, timeout=30).json()["result"]
    assert first["resultType"] == "input_required"
    [(input_key, request)] = first["inputRequests"].items()
    assert request["method"] == "elicitation/create" and request["params"]["mode"] == "form"
    answer = {input_key: {"action": "accept", "content": {"context": "ctx"}}}
    body["params"]["inputResponses"] = answer
    done = httpx.post(f"{live_url}/mcp", json=body, headers=headers, timeout=30).json()["result"]
    assert done["resultType"] == "complete" and done["messages"][0]["content"]["text"].endswith("ctx")
    # A declined form is not asked again; without elicitation the missing argument is -32602.
    body["params"]["inputResponses"] = {input_key: {"action": "decline"}}
    declined = httpx.post(f"{live_url}/mcp", json=body, headers=headers, timeout=30).json()
    assert declined["error"]["code"] == INVALID_PARAMS
    plain = _post(live_url, key, "prompts/get", params, id=2).json()
    assert plain["error"]["code"] == INVALID_PARAMS
