"""Black-box: run artifacts as MCP resources, through the `mcp` SDK client and raw POSTs on a live host.

The conformance-artifact tool's resource link reads back its text; another tenant reading that URI
gets the unknown-URI error, byte for byte but the JSON-RPC id and the echoed URI (SEP-2164);
traversal and foreign schemes are -32602, never a 5xx; the list is the caller's artifacts,
newest first, paged; templates, the conformance fixture resources, and template completion.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import httpx
import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import encode_header_value

from apps.agents.services import workflow_create
from apps.core.ids import project_id
from apps.mcp.resources import RESOURCES_PAGE_SIZE, complete_template_variable
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_from_api_key
from tests.mcp.conftest import VERSION, rpc
from tests.mcp.sdk_client import mcp_client

pytestmark = pytest.mark.django_db(transaction=True)

ARTIFACT_TEMPLATE = "openwop:runs/{runId}/artifacts/{artifactId}"
URI_RE = re.compile(r"openwop:runs/(?P<run>[^/]+)/artifacts/(?P<artifact>[^/]+)")


@pytest.fixture
def key(live_url: str, live_worker, make_key) -> str:  # type: ignore[no-untyped-def]
    return make_key("acme")


@pytest.fixture
def globex_key(live_url: str, make_key) -> str:  # type: ignore[no-untyped-def]
    return make_key("globex")


async def _post(live_url: str, key: str, method: str, params: dict[str, Any], *, id: int) -> httpx.Response:
    body = rpc(method, params, id=id)
    headers = {
        "Authorization": f"Bearer {key}",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
        "Accept": "application/json, text/event-stream",
    }
    if method == "resources/read":
        headers["Mcp-Name"] = encode_header_value(params["uri"])
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(
            f"{live_url}/mcp", content=json.dumps(body), headers={**headers, "Content-Type": "application/json"}
        )


def _without_id(response: httpx.Response, uri: str) -> bytes:
    """The body with its JSON-RPC id and the echoed URI blanked: what must not differ."""
    message = json.loads(response.content)
    assert message.pop("id") is not None
    return json.dumps(message, separators=(",", ":")).replace(json.dumps(uri)[1:-1], "<uri>").encode()


async def _artifact_call(client: Any, text: str) -> tuple[types.CallToolResult, types.ResourceLink]:
    result = await client.call_tool("conformance-artifact", {"text": text})
    assert result.is_error is False
    [link] = [item for item in result.content if isinstance(item, types.ResourceLink)]
    return result, link


async def test_artifact_link_reads_back_and_is_private_to_its_tenant(live_url: str, key: str, globex_key: str) -> None:
    text = "Hello from an artifact: ünïcode & <markup>"
    async with mcp_client(live_url, key) as client:
        result, link = await _artifact_call(client, text)
        run_id = result.meta["dev.openwop/runId"]  # type: ignore[index]
        match = URI_RE.fullmatch(link.uri)
        assert match is not None and match["run"] == project_id(run_id), link.uri
        assert link.name == "text" and link.mime_type == "text/plain"

        read = await client.read_resource(link.uri, cache_mode="bypass")
        [contents] = read.contents
        assert isinstance(contents, types.TextResourceContents)
        assert contents.text == text and contents.mime_type == "text/plain" and contents.uri == link.uri
        assert read.ttl_ms is not None and read.ttl_ms > 0 and read.cache_scope == "private"

        # The same resource, named in a form normalization brings back to the minted one.
        shouted = "OPENWOP:%72uns/" + link.uri.removeprefix("openwop:runs/")
        again = await client.read_resource(shouted, cache_mode="bypass")
        assert [c.text for c in again.contents] == [text]  # type: ignore[union-attr]

        # An artifact id the run does not have, a run id nobody has: not found.
        unknown = f"openwop:runs/{match['run']}/artifacts/{'x' * 26}"
        with pytest.raises(MCPError) as missing:
            await client.read_resource(unknown, cache_mode="bypass")
        assert missing.value.error.code == -32602 and missing.value.error.data == {"uri": unknown}

    # Another tenant: the very URI is the same error as an unknown one, byte for byte.
    foreign = await _post(live_url, globex_key, "resources/read", {"uri": link.uri}, id=7)
    nobody = f"openwop:runs/{project_id('acme/' + 'N' * 26)}/artifacts/{match['artifact']}"
    unknown_run = await _post(live_url, globex_key, "resources/read", {"uri": nobody}, id=8)
    unknown_own = await _post(live_url, key, "resources/read", {"uri": unknown}, id=9)
    assert foreign.status_code == unknown_run.status_code == unknown_own.status_code < 500
    error = json.loads(foreign.content)["error"]
    assert error["code"] == -32602 and error["data"] == {"uri": link.uri}
    assert text not in foreign.text
    assert _without_id(foreign, link.uri) == _without_id(unknown_run, nobody) == _without_id(unknown_own, unknown)


@pytest.mark.parametrize(
    "uri",
    [
        "file:///etc/passwd",
        "http://127.0.0.1/mcp",
        "https://example.com/x",
        "openwop:runs/../x",
        "openwop:runs/%2e%2e/%2E%2e/etc/passwd",
        "openwop:runs/./acme~2Fx/artifacts/y",
        "openwop:runs\\..\\x",
        "openwop:runs/%5c..%5cx",
        "test://template/../static-text",
        "test://static-text/..",
        "openwop:runs/%zz",
        "openwop:runs/a b",
        "data:text/plain,hi",
        "runs/x",
        "",
    ],
)
async def test_traversal_and_foreign_schemes_are_refused(live_url: str, key: str, uri: str) -> None:
    response = await _post(live_url, key, "resources/read", {"uri": uri}, id=3)
    assert response.status_code < 500, response.text
    error = json.loads(response.content)["error"]
    assert error["code"] == -32602 and error["data"] == {"uri": uri}
    async with mcp_client(live_url, key) as client:
        with pytest.raises(MCPError) as refused:
            await client.read_resource(uri, cache_mode="bypass")
    assert refused.value.error.code == -32602


def _many_artifacts_workflow(count: int) -> None:
    try:
        nodes = [
            {"id": f"a{i}", "kind": "artifact", "config": {"name": f"artifact-{i}", "text": f"number {i}"}}
            for i in range(count)
        ]
        workflow_create(
            tenant=Tenant.objects.get(slug="acme"),
            workflow_id="many-artifacts",
            definition={"nodes": nodes},
            input_schema={"type": "object"},
        )
    finally:
        connection.close()


async def test_list_is_the_callers_artifacts_newest_first_in_pages(live_url: str, key: str, globex_key: str) -> None:
    count = RESOURCES_PAGE_SIZE + 5
    await sync_to_async(_many_artifacts_workflow)(count)
    async with mcp_client(live_url, key) as client:
        many = await client.call_tool("many-artifacts", {})
        links = [item for item in many.content if isinstance(item, types.ResourceLink)]
        assert [link.name for link in links] == [f"artifact-{i}" for i in range(count)]
        _, newest = await _artifact_call(client, "the newest")

        first = await client.list_resources(cache_mode="bypass")
        assert first.ttl_ms is not None and first.cache_scope == "private"
        assert len(first.resources) == RESOURCES_PAGE_SIZE and first.next_cursor
        second = await client.list_resources(cursor=first.next_cursor)
        assert second.next_cursor is None
    listed = [r.uri for r in [*first.resources, *second.resources]]
    expected = [newest.uri, *[link.uri for link in reversed(links)], "test://static-text", "test://static-binary"]
    assert listed == expected
    assert all(r.name for r in [*first.resources, *second.resources])

    async with mcp_client(live_url, globex_key) as other:
        theirs = await other.list_resources(cache_mode="bypass")
        assert [r.uri for r in theirs.resources] == ["test://static-text", "test://static-binary"]
        # A cursor is bound to the tenant it was minted for, and forged ones are refused.
        for cursor in (first.next_cursor, "not-a-cursor"):
            with pytest.raises(MCPError) as refused:
                await other.list_resources(cursor=cursor)
            assert refused.value.error.code == -32602


async def test_templates_fixture_resources_and_completion(live_url: str, key: str) -> None:
    async with mcp_client(live_url, key) as client:
        templates = await client.list_resource_templates(cache_mode="bypass")
        assert templates.ttl_ms is not None and templates.cache_scope == "private"
        assert {t.uri_template for t in templates.resource_templates} == {
            ARTIFACT_TEMPLATE,
            "test://template/{id}/data",
        }

        text = await client.read_resource("test://static-text", cache_mode="bypass")
        assert text.contents[0].text and text.contents[0].mime_type == "text/plain"  # type: ignore[union-attr]
        binary = await client.read_resource("test://static-binary", cache_mode="bypass")
        blob = binary.contents[0]
        assert isinstance(blob, types.BlobResourceContents) and blob.mime_type == "image/png"
        assert base64.b64decode(blob.blob).startswith(b"\x89PNG")
        templated = await client.read_resource("test://template/123/data", cache_mode="bypass")
        assert "123" in templated.contents[0].text  # type: ignore[union-attr]

        missing = "test://nonexistent-resource-for-conformance-testing"
        with pytest.raises(MCPError) as not_found:
            await client.read_resource(missing, cache_mode="bypass")
        assert not_found.value.error.code == -32602 and not_found.value.error.data == {"uri": missing}

        _, link = await _artifact_call(client, "complete me")
    match = URI_RE.fullmatch(link.uri)
    assert match is not None
    subject = await sync_to_async(subject_from_api_key)(key)

    def complete(template: str, name: str, value: str, context: dict[str, str]) -> list[str] | None:
        try:
            return complete_template_variable(subject, template, name, value, context)
        finally:
            connection.close()

    complete_async = sync_to_async(complete)
    assert await complete_async(ARTIFACT_TEMPLATE, "runId", "", {}) == [match["run"]]
    assert await complete_async(ARTIFACT_TEMPLATE, "runId", "globex", {}) == []
    assert await complete_async(ARTIFACT_TEMPLATE, "artifactId", "", {"runId": match["run"]}) == [match["artifact"]]
    assert await complete_async("test://template/{id}/data", "id", "12", {}) == ["123"]
    assert await complete_async("openwop:nothing/{x}", "x", "", {}) is None
