"""The host as an MCP 2026-07-28 client: `server/discover` naming our revision, the highest common
revision within [floor, preferred], then `tools/call` following `input_required` rounds up to the
facet's `mcp.mrtr.maxRounds` (interop.md §The MCP round ceiling).

Each round's `requestState` is echoed byte for byte and never inspected; interim
InputRequiredResults are never stored (not in the run's log, not as node output): only the final
result is. Answers to a peer's input requests come from the caller's fixed `elicitationAnswer`
(a workflow's config, or the seam's body); a request we have no answer for fails the node.
"""

from __future__ import annotations

from typing import Any

import mcp_types
from mcp.shared.inbound import encode_header_value
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.jsonrpc import UNSUPPORTED_PROTOCOL_VERSION
from pydantic import ValidationError

from apps.core.errors import vendor_code
from apps.facets.services import facet_ensure
from apps.peers.outbound import (
    PEER_ERROR,
    PEER_PROTOCOL_ERROR,
    Agreement,
    Outbound,
    PeerCancelled,
    PeerFailure,
    negotiate,
    peer_jsonrpc,
    peer_refused_version,
    probe_not_refused,
)

ACCEPT = "application/json, text/event-stream"
ELICITATION = "elicitation/create"
# The peer asked for input this call has no answer for (only elicitation, from elicitationAnswer):
# the request is well-formed, this call cannot satisfy it.
MCP_INPUT_UNANSWERABLE = vendor_code("mcp_input_unanswerable", 422)


def _meta(outbound: Outbound, version: str, capabilities: dict[str, Any]) -> dict[str, Any]:
    # SEP-414 / interop.md §Trace context: unprefixed traceparent/tracestate in params._meta.
    return {PROTOCOL_VERSION_META_KEY: version, CLIENT_CAPABILITIES_META_KEY: capabilities, **outbound.trace_fields()}


def _post(
    outbound: Outbound, version: str, method: str, params: dict[str, Any], name: str | None = None
) -> dict[str, Any]:
    headers = {"MCP-Protocol-Version": version, "Mcp-Method": method, "Accept": ACCEPT}
    if name is not None:
        headers["Mcp-Name"] = encode_header_value(name)
    return peer_jsonrpc(outbound, outbound.peer_url, headers=headers, method=method, params=params)


def mcp_call(
    outbound: Outbound,
    *,
    requested: str | None,
    tool: str | None,
    arguments: dict[str, Any],
    elicitation_answer: dict[str, Any] | None,
    probe: bool = False,
) -> dict[str, Any]:
    """One exchange; returns `{negotiatedVersion, peerDigest, result}` where result is the final
    CallToolResult verbatim (an `isError` result included), or the DiscoverResult without a tool.

    `probe` (conformance seam only): a `requested` revision above the floor that we do not speak is
    sent on `server/discover` as asked; the peer's answer to it settles the exchange (a -32022, or
    a list without it, is its refusal), and nothing else is sent."""
    capabilities: dict[str, Any] = {"elicitation": {"form": {}}} if elicitation_answer is not None else {}
    discovered: dict[str, Any] = {}
    offers: list[str] = []  # kept: a probe is settled by whether the peer offered it

    def offers_of(candidate: str) -> list[str]:
        document = _post(outbound, candidate, "server/discover", {"_meta": _meta(outbound, candidate, capabilities)})
        error = document.get("error")
        if isinstance(error, dict):
            data = _error_data(error)
            if error.get("code") == UNSUPPORTED_PROTOCOL_VERSION and isinstance(data.get("supported"), list):
                offers.extend(v for v in data["supported"] if isinstance(v, str))
                return offers
            raise PeerFailure(PEER_ERROR, "The peer refused server/discover.", {"code": error.get("code")})
        try:
            result = mcp_types.DiscoverResult.model_validate(document.get("result"))
        except ValidationError:
            raise PeerFailure(PEER_PROTOCOL_ERROR, "The peer's DiscoverResult is not valid.") from None
        discovered.update(document["result"])
        offers.extend(result.supported_versions)
        return offers

    agreement = negotiate(outbound, protocol="mcp", requested=requested, offers_of=offers_of, probe=probe)
    if agreement.probing:
        if agreement.version in offers:
            raise probe_not_refused(outbound, agreement)
        raise peer_refused_version(outbound, agreement.decision, offers)
    version = agreement.version
    outcome = {"negotiatedVersion": version, "peerDigest": outbound.peer_digest}
    if tool is None:
        return {**outcome, "result": discovered}
    result = _call_tool(outbound, agreement, tool, arguments, capabilities, elicitation_answer)
    return {**outcome, "result": result}


def _error_data(error: dict[str, Any]) -> dict[str, Any]:
    data = error.get("data")
    return data if isinstance(data, dict) else {}


def _call_tool(
    outbound: Outbound,
    agreement: Agreement,
    tool: str,
    arguments: dict[str, Any],
    capabilities: dict[str, Any],
    elicitation_answer: dict[str, Any] | None,
) -> dict[str, Any]:
    max_rounds = facet_ensure(protocol="mcp").mrtr_max_rounds
    version = agreement.version
    params: dict[str, Any] = {"name": tool, "arguments": arguments, "_meta": _meta(outbound, version, capabilities)}
    rounds = 0
    while True:
        if outbound.cancel_requested():
            raise PeerCancelled
        document = _post(outbound, version, "tools/call", params, name=tool)
        error = document.get("error")
        if isinstance(error, dict):
            if error.get("code") == UNSUPPORTED_PROTOCOL_VERSION:
                raise peer_refused_version(outbound, agreement.decision, _error_data(error).get("supported") or ())
            raise PeerFailure(PEER_ERROR, "The peer refused tools/call.", {"code": error.get("code")})
        result = document.get("result")
        if not isinstance(result, dict):
            raise PeerFailure(PEER_PROTOCOL_ERROR, "The peer's tools/call answer has no result.")
        result_type = result.get("resultType", "complete")  # absent means complete (2026-07-28)
        if result_type not in ("complete", "input_required"):
            # Unknown values are invalid; we never declare the tasks extension, so "task" is too.
            raise PeerFailure(PEER_PROTOCOL_ERROR, f"The peer answered an unknown resultType {result_type!r}.")
        if result_type == "complete":
            try:
                mcp_types.CallToolResult.model_validate(result)
            except ValidationError:
                raise PeerFailure(PEER_PROTOCOL_ERROR, "The peer's CallToolResult is not valid.") from None
            return result
        rounds += 1
        if rounds > max_rounds:
            raise PeerFailure(
                "mcp_mrtr_rounds_exceeded",
                f"The peer asked for input more than {max_rounds} times (mcp.mrtr.maxRounds).",
                {"maxRounds": max_rounds},
            )
        params = _next_round(params, result, elicitation_answer)


def _next_round(
    params: dict[str, Any], result: dict[str, Any], elicitation_answer: dict[str, Any] | None
) -> dict[str, Any]:
    """The retry: same method and arguments, our answers, the peer's requestState as it came."""
    try:
        interim = mcp_types.InputRequiredResult.model_validate(result)
    except ValidationError:
        raise PeerFailure(PEER_PROTOCOL_ERROR, "The peer's InputRequiredResult is not valid.") from None
    requests = result["inputRequests"] if isinstance(result.get("inputRequests"), dict) else {}
    if interim.request_state is None and not requests:
        raise PeerFailure(PEER_PROTOCOL_ERROR, "An InputRequiredResult must carry inputRequests or requestState.")
    responses: dict[str, Any] = {}
    for key, request in requests.items():
        method = request.get("method") if isinstance(request, dict) else None
        if method != ELICITATION or elicitation_answer is None:
            raise PeerFailure(
                MCP_INPUT_UNANSWERABLE, "The peer asked for input this call has no answer for.", {"method": method}
            )
        responses[key] = elicitation_answer
    retry = {k: v for k, v in params.items() if k not in ("inputResponses", "requestState")}
    if responses:
        retry["inputResponses"] = responses
    if "requestState" in result:
        retry["requestState"] = result["requestState"]  # byte for byte; never inspected
    return retry


# ---------------------------------------------------------------------------------------------
# ctx.mcp (host-services.md §mcp, RFC 0204): what a workflow's `mcp.client` node asks of a bound
# server. Each method resolves to the server's MCP result UNALTERED (content, structuredContent,
# isError, _meta, nextCursor, cache hints): a tool error is a result, not a failure; one page is
# one page, and the caller's cursor is forwarded as given.

CTX_MCP_METHODS = ("callTool", "listTools", "readResource", "serverHealth")
_REQUEST_OF = {"listTools": "tools/list", "readResource": "resources/read"}


def mcp_ctx_call(
    outbound: Outbound,
    *,
    method: str,
    name: str | None = None,
    arguments: dict[str, Any] | None = None,
    cursor: str | None = None,
    uri: str | None = None,
) -> dict[str, Any]:
    """`ctx.mcp.<method>` against the server `outbound` names. serverHealth never fails: it is
    `{state: "reachable", discover}` when server/discover succeeded with a revision we negotiate,
    else `{state: "unreachable", reason}` (reachability, never a session state)."""
    discovered: dict[str, Any] = {}

    def offers_of(candidate: str) -> list[str]:
        document = _post(outbound, candidate, "server/discover", {"_meta": _meta(outbound, candidate, {})})
        error = document.get("error")
        if isinstance(error, dict):
            data = _error_data(error)
            if error.get("code") == UNSUPPORTED_PROTOCOL_VERSION and isinstance(data.get("supported"), list):
                return [v for v in data["supported"] if isinstance(v, str)]
            raise PeerFailure(PEER_ERROR, "The server refused server/discover.", {"code": error.get("code")})
        try:
            result = mcp_types.DiscoverResult.model_validate(document.get("result"))
        except ValidationError:
            raise PeerFailure(PEER_PROTOCOL_ERROR, "The server's DiscoverResult is not valid.") from None
        discovered.clear()
        discovered.update(document["result"])
        return list(result.supported_versions)

    if method == "serverHealth":
        try:
            negotiate(outbound, protocol="mcp", requested=None, offers_of=offers_of)
        except PeerFailure as failure:
            return {"state": "unreachable", "reason": failure.code}
        return {"state": "reachable", "discover": dict(discovered)}
    agreement = negotiate(outbound, protocol="mcp", requested=None, offers_of=offers_of)
    if method == "callTool":
        if not name:
            raise PeerFailure("validation_error", "callTool needs the tool's name.", {"field": "name"})
        return _call_tool(outbound, agreement, name, dict(arguments or {}), {}, None)
    request = _REQUEST_OF.get(method)
    if request is None:
        raise PeerFailure("validation_error", f"ctx.mcp has no method {method!r}.", {"field": "method"})
    params: dict[str, Any] = {"_meta": _meta(outbound, agreement.version, {})}
    if method == "listTools" and cursor is not None:
        params["cursor"] = cursor  # opaque: forwarded exactly as the caller got it
    if method == "readResource":
        if not uri:
            raise PeerFailure("validation_error", "readResource needs the resource's uri.", {"field": "uri"})
        params["uri"] = uri
    # The Mcp-Name header names what the method acts on: a resource by its uri (as a tool by its name).
    document = _post(outbound, agreement.version, request, params, name=uri if method == "readResource" else None)
    error = document.get("error")
    if isinstance(error, dict):
        if error.get("code") == UNSUPPORTED_PROTOCOL_VERSION:
            raise peer_refused_version(outbound, agreement.decision, _error_data(error).get("supported") or ())
        raise PeerFailure(PEER_ERROR, f"The server refused {request}.", {"code": error.get("code")})
    result = document.get("result")
    if not isinstance(result, dict):
        raise PeerFailure(PEER_PROTOCOL_ERROR, f"The server's {request} answer has no result.")
    return result
