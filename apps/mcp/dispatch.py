"""One request in, one result out: the part of the mount both transports share.

HTTP (views.py) and stdio (the `mcp_stdio` command) differ only in how bytes arrive, how the caller
authenticates, and how a request is cancelled; the ladder, the negotiation and the methods are here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from asgiref.sync import sync_to_async
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from apps.core.protocol_versions import version_key
from apps.facets import surfaces
from apps.facets.models import Facet
from apps.facets.negotiation import inbound_peer_origin, negotiation_decide_deferred
from apps.facets.policy import effective_floor, tenant_floors_cached
from apps.facets.services import afacet_cached, facet_ensure
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
from apps.mcp.tools import Finish, settled, tool_call_begin, tools_list_result
from apps.tenants.subject import Subject

DISCOVER_TTL_MS = 60_000
INSTRUCTIONS = (
    "Each tool is one of your OpenWOP workflows; calling it starts a run. Runs that need approval "
    "ask through elicitation; with the tasks extension, long runs become tasks."
)


def server_capabilities() -> dict[str, Any]:
    """What the server offers at every revision (`server/discover` adds logging and extensions)."""
    return {
        "tools": {"listChanged": False},
        "prompts": {"listChanged": False},
        "resources": {"listChanged": False},
        "completions": {},
    }


def tasks_served(facet: Facet | None = None) -> bool:
    """The extension is served only while the operator keeps `extensions` in mcp.features[]."""
    return surfaces.is_served(surfaces.MCP_FEATURE_PREFIX + "extensions") and (
        "extensions" in (facet or facet_ensure(protocol="mcp")).features
    )


async def exchange_begin(
    *,
    body: Mapping[str, Any],
    subject: Subject,
    headers: Mapping[str, str] | None,
    origin: str | None,
) -> tuple[Exchange, asyncio.Future[None]]:
    """The ladder, then one negotiation for this exchange (the facet from the process cache). Its
    `negotiation.decided` record is group-committed from the event loop: the caller may run the
    method meanwhile and awaits `recorded` before it answers, on every path (HTTP:
    views.mcp_endpoint). A refusal raised here has awaited its record already."""
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
        trace = trace_context_read(params, headers)
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


def discover_result(exchange: Exchange, params: dict[str, Any]) -> dict[str, Any]:
    """`server/discover`. `supportedVersions` are the revisions this caller may use: the host's
    offered list, less any below the caller's tenant floor (then the answer is the tenant's own,
    `cacheScope: private`)."""
    facet = facet_ensure(protocol="mcp")
    versions, scope = list(facet.versions), "public"
    floors = tenant_floors_cached(tenant_slug=exchange.subject.tenant)
    floor = effective_floor(protocol="mcp", host_floor=facet.minimum_version, floors=floors, agent_pk=None)
    if floor != facet.minimum_version:
        kept = [v for v in versions if version_key("mcp", v) >= version_key("mcp", floor)]
        versions, scope = kept, "private"
    capabilities = {**server_capabilities(), "logging": {}}
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


Method = Callable[[Exchange, dict[str, Any]], dict[str, Any]]
# The methods that read or write in one sync step. The reads, the handshake-era revisions serve too
# (apps/mcp/handshake.py); server/discover and the tasks extension are 2026-07-28's alone.
READ_METHODS: dict[str, Method] = {
    "tools/list": tools_list_result,
    "resources/list": resources_list,
    "resources/templates/list": resource_templates_list,
    "resources/read": resource_read,
    "prompts/list": prompts_list,
    "prompts/get": prompt_get,
    "completion/complete": completion_complete,
}
_SYNC_METHODS: dict[str, Method] = {
    **READ_METHODS,
    "server/discover": discover_result,
    "tasks/get": task_get,
    "tasks/update": task_update,
    "tasks/cancel": task_cancel,
}


async def dispatch_begin(exchange: Exchange, method: str, params: Any) -> Finish:
    """Refusals now, and a finishing step that HTTP may stream (only `tools/call` ever waits;
    every other method's answer is already in hand)."""
    if not isinstance(params, dict):
        raise invalid_params("params must be an object")
    if method == "tools/call":
        return await tool_call_begin(exchange, params)
    if method not in _SYNC_METHODS:
        raise method_not_found(method)
    return settled(await sync_to_async(_SYNC_METHODS[method])(exchange, params))
