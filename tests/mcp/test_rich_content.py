"""Artifacts as rich tool content: image, audio, embedded resource and resource links.

Black-box through the `mcp` SDK client on a live host (the conformance suite's content tools), and
in-process: a run whose workflow has no artifact node is answered without any database read.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import mcp_types as types
import pytest

from apps.core.ids import project_id
from apps.mcp.resources import atool_result_of, tool_result_of
from apps.runs.models import RunTransport
from apps.runs.services import run_create
from tests.mcp.conftest import TASKS, McpCaller
from tests.mcp.sdk_client import mcp_client


@pytest.fixture
def key(live_url: str, live_worker, make_key) -> str:  # type: ignore[no-untyped-def]
    return make_key("acme")


def _of(result: types.CallToolResult, kind: type) -> list[Any]:
    return [item for item in result.content if isinstance(item, kind)]


@pytest.mark.django_db(transaction=True)
async def test_image_and_audio_artifacts_are_image_and_audio_content(live_url: str, key: str) -> None:
    async with mcp_client(live_url, key) as client:
        image = await client.call_tool("test_image_content", {})
        audio = await client.call_tool("test_audio_content", {})
        [picture] = _of(image, types.ImageContent)
        assert picture.mime_type == "image/png" and base64.b64decode(picture.data).startswith(b"\x89PNG\r\n\x1a\n")
        [sound] = _of(audio, types.AudioContent)
        assert sound.mime_type == "audio/wav" and base64.b64decode(sound.data)[:4] == b"RIFF"
        # Each also links its resource, which reads back the very bytes.
        for result, item in ((image, picture), (audio, sound)):
            assert image.is_error is False and isinstance(result.content[0], types.TextContent)
            [link] = _of(result, types.ResourceLink)
            assert link.mime_type == item.mime_type
            read = await client.read_resource(link.uri, cache_mode="bypass")
            [blob] = read.contents
            assert isinstance(blob, types.BlobResourceContents)
            assert blob.blob == item.data and blob.mime_type == item.mime_type


@pytest.mark.django_db(transaction=True)
async def test_embedded_and_mixed_content(live_url: str, key: str) -> None:
    async with mcp_client(live_url, key) as client:
        embedded = await client.call_tool("test_embedded_resource", {})
        [resource] = _of(embedded, types.EmbeddedResource)
        [link] = _of(embedded, types.ResourceLink)
        inner = resource.resource
        assert isinstance(inner, types.TextResourceContents)
        assert inner.uri == link.uri and inner.mime_type == "text/plain" and inner.text
        read = await client.read_resource(link.uri, cache_mode="bypass")
        assert read.contents[0].text == inner.text  # type: ignore[union-attr]

        mixed = await client.call_tool("test_multiple_content_types", {})
        kinds = [item.type for item in mixed.content]
        assert kinds[0] == "text" and {"image", "resource", "resource_link"} <= set(kinds)
        assert mixed.structured_content == {"text": "Text, an image and a resource."}

        plain = await client.call_tool("echo", {"n": 1})
        assert [item.type for item in plain.content] == ["text"]


@pytest.mark.django_db
def test_a_run_without_artifact_nodes_costs_no_read(acme: McpCaller, django_assert_num_queries) -> None:  # type: ignore[no-untyped-def]
    subject = acme.subject
    plain = run_create(subject=subject, workflow_id="echo", inputs={"a": 1}, transport=RunTransport.MCP, inline=True)
    assert plain.is_terminal
    with django_assert_num_queries(0):
        result = asyncio.run(atool_result_of(plain))
        assert tool_result_of(plain) == result
    assert [item["type"] for item in result["content"]] == ["text"]

    artifact = run_create(
        subject=subject,
        workflow_id="conformance-artifact",
        inputs={"text": "t"},
        transport=RunTransport.MCP,
        inline=True,
    )
    with django_assert_num_queries(1):
        result = tool_result_of(artifact)
    assert [item["type"] for item in result["content"]] == ["text", "resource_link"]
    assert result["content"][1]["uri"].startswith(f"openwop:runs/{project_id(artifact.run_id)}/artifacts/")


@pytest.mark.django_db
def test_a_completed_task_carries_its_artifacts(acme: McpCaller) -> None:
    with_tasks = {"elicitation": {"form": {}}, "extensions": {TASKS: {}}}
    called = acme.call("tools/call", {"name": "test_image_content", "arguments": {}}, capabilities=with_tasks)
    assert called.status_code == 200, called.content
    run_id = called.json()["result"]["_meta"]["dev.openwop/runId"]
    got = acme.call("tasks/get", {"taskId": project_id(run_id)}, capabilities=with_tasks)
    task = got.json()["result"]
    assert task["status"] == "completed", task
    assert [item["type"] for item in task["result"]["content"]] == ["text", "resource_link", "image"]
