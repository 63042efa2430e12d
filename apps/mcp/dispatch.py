"""One request in, one result out: the part of the mount both transports share.

HTTP (views.py) and stdio (the `mcp_stdio` command) differ only in how bytes arrive, how the caller
authenticates, and how a request is cancelled; the ladder, the negotiation and the methods are here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from asgiref.sync import sync_to_async
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from apps.facets import surfaces
from apps.facets.models import Facet
from apps.facets.negotiation import inbound_peer_origin, negotiation_decide_deferred
from apps.facets.policy import effective_floor, tenant_floors_cached
from apps.facets.services import afacet_cached, facet_ensure
from apps.facets.versions import version_key
from apps.mcp.completion import completion_complete
from apps.mcp.errors import invalid_params, method_not_found
from apps.mcp.exchange import (
    TASKS_EXTENSION,
    Exchange,
    capabilities_check,
    envelope_read,
    headers_check,
    param_headers_read,
    refusal_error,
    trace_context_read,
)
from apps.mcp.projection import server_meta
from apps.mcp.prompts import prompt_get, prompts_list
from apps.mcp.resources import resource_read, resource_templates_list, resources_list
from apps.mcp.tasks_extension import task_cancel, task_get, task_update
from apps.mcp.tools import Finish, settled, tool_call, tool_call_begin, tools_list_result
from apps.tenants.subject import Subject

DISCOVER_TTL_MS = 60_000
INSTRUCTIONS = (
    "Each tool is one of your OpenWOP workflows; calling it starts a run. Runs that need approval "
    "ask through elicitation; with the tasks extension, long runs become tasks."
)


def tasks_served(facet: Facet | None = None) -> bool:
    """The extension is served only while the operator keeps `extensions` in mcp.features[]."""
    return surfaces.is_served(surfaces.MCP_FEATURE_PREFIX + "extensions") and (
        "extensions" in (facet or facet_ensure(protocol="mcp")).features
    )


async def exchange_open(
    *,
    body: Mapping[str, Any],
    subject: Subject,
    headers: Mapping[str, str] | None,
    origin: str | None,
) -> Exchange:
    """The ladder, then one negotiation (and its `negotiation.decided` record, group-committed
    from the event loop and committed when this returns) for this exchange; the facet from the
    process cache."""
    exchange, recorded = await exchange_begin(body=body, subject=subject, headers=headers, origin=origin)
    await recorded
    return exchange


async def exchange_begin(
    *,
    body: Mapping[str, Any],
    subject: Subject,
    headers: Mapping[str, str] | None,
    origin: str | None,
) -> tuple[Exchange, asyncio.Future[None]]:
    """`exchange_open` with the record still committing: the caller runs the method meanwhile and
    awaits `recorded` before it answers, on every path (HTTP: views.mcp_endpoint). A refusal
    raised here has awaited its record already."""
    params = body.get("params")
    envelope = envelope_read(params)
    if headers is not None:
        headers_check(body=body, envelope=envelope, headers=headers)
    capabilities_check(params)
    peer_origin = inbound_peer_origin(origin_header=origin, subject=subject)
    facet = await afacet_cached(protocol="mcp")
    decision, recorded = await negotiation_decide_deferred(
        protocol="mcp", requested=envelope.requested_version, peer_origin=peer_origin, subject=subject, facet=facet
    )
    try:
        if not decision.accepted or decision.version not in MODERN_PROTOCOL_VERSIONS:
            # A handshake-era revision has no per-request `_meta` form: it is reached by `initialize`.
            raise refusal_error(decision, envelope.requested_version)
        trace = trace_context_read(
            params,
            headers.get("traceparent") if headers is not None else None,
            headers.get("tracestate") if headers is not None else None,
        )
        capabilities = dict(envelope.capabilities)
        if not tasks_served(facet):
            capabilities.pop("extensions", None)  # an extension we do not serve grants nothing
    except BaseException:
        await asyncio.shield(recorded)
        raise
    exchange = Exchange(
        subject=subject,
        version=str(decision.version),
        capabilities=capabilities,
        trace=trace,
        param_headers=param_headers_read(headers),
    )
    return exchange, recorded


def discover_result(subject: Subject | None = None) -> dict[str, Any]:
    """`server/discover`. `supportedVersions` are the revisions this caller may use: the host's
    offered list, less any below the caller's tenant floor (issue 24; then the answer is the
    tenant's own, `cacheScope: private`)."""
    facet = facet_ensure(protocol="mcp")
    versions, scope = list(facet.versions), "public"
    if subject is not None:
        floors = tenant_floors_cached(tenant_slug=subject.tenant)
        floor = effective_floor(protocol="mcp", host_floor=facet.minimum_version, floors=floors, agent_pk=None)
        if floor != facet.minimum_version:
            kept = [v for v in versions if version_key("mcp", v) >= version_key("mcp", floor)]
            versions, scope = kept, "private"
    capabilities: dict[str, Any] = {
        "tools": {"listChanged": False},
        "prompts": {"listChanged": False},
        "resources": {"listChanged": False},
        "completions": {},
        "logging": {},
    }
    if tasks_served():
        capabilities["extensions"] = {TASKS_EXTENSION: {}}
    return {
        "resultType": "complete",
        "supportedVersions": versions,
        "capabilities": capabilities,
        "instructions": INSTRUCTIONS,
        "ttlMs": DISCOVER_TTL_MS,
        "cacheScope": scope,
        "_meta": server_meta(),
    }


async def dispatch(exchange: Exchange, method: str, params: Any) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise invalid_params("params must be an object")
    if method == "server/discover":
        return await sync_to_async(discover_result)(exchange.subject)
    if method == "tools/list":
        return await sync_to_async(tools_list_result)(exchange.subject)
    if method == "tools/call":
        return await tool_call(exchange, params)
    if method == "resources/list":
        return await sync_to_async(resources_list)(exchange, params)
    if method == "resources/templates/list":
        return await sync_to_async(resource_templates_list)(exchange, params)
    if method == "resources/read":
        return await sync_to_async(resource_read)(exchange, params)
    if method == "prompts/list":
        return await sync_to_async(prompts_list)(exchange, params)
    if method == "prompts/get":
        return await sync_to_async(prompt_get)(exchange, params)
    if method == "completion/complete":
        return await sync_to_async(completion_complete)(exchange, params)
    if method == "tasks/get":
        return await sync_to_async(task_get)(exchange, params)
    if method == "tasks/update":
        return await sync_to_async(task_update)(exchange, params)
    if method == "tasks/cancel":
        return await sync_to_async(task_cancel)(exchange, params)
    raise method_not_found(method)


async def dispatch_begin(exchange: Exchange, method: str, params: Any) -> Finish:
    """HTTP's two-step dispatch: refusals now, and a finishing step that may be streamed (only
    `tools/call` ever waits; every other method's answer is already in hand)."""
    if method == "tools/call" and isinstance(params, dict):
        return await tool_call_begin(exchange, params)
    return settled(await dispatch(exchange, method, params))
