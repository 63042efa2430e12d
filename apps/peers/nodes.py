"""The node kinds that call peers: `a2a.call` (send a message to a peer agent, wait for its task)
and `mcp.call` (call a tool on a peer MCP server).

A workflow names the peer URL and, optionally, the `credentialId` of a credential its tenant
registered for that origin (security-defaults §Onward hops: the run's own inbound credential is
never forwarded). That credential also says what the peer's agent card must prove
(`cardSignaturePolicy`, a pinned key; without one: verify-if-present). Config strings may take
`{{input}}` placeholders, as `echo` does.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from apps.core.errors import NotFound
from apps.core.ids import split_bound_id
from apps.peers.a2a_client import a2a_call
from apps.peers.mcp_client import CTX_MCP_METHODS, mcp_call, mcp_ctx_call
from apps.peers.outbound import CardTrust, Outbound, PeerCancelled, PeerFailure
from apps.peers.seams import conformance_seams_on
from apps.peers.selectors import peer_authorization, peer_binding_get, peer_credential_get, peer_origin_of
from apps.runs.models import Run
from apps.runs.nodes import (
    CancelObserved,
    Completed,
    Failed,
    NodeContext,
    NodeKind,
    NodeResult,
    register_node_kind,
    render_config,
)
from apps.tenants.models import Tenant

DEFAULT_TIMEOUT_MS = 30_000
_COMMON: dict[str, Any] = {
    "url": {"type": "string", "minLength": 1, "maxLength": 2048},
    "credentialId": {"type": "string", "minLength": 1, "maxLength": 128},
    "version": {"type": "string", "minLength": 1, "maxLength": 32},
    "timeoutMs": {"type": "integer", "minimum": 100, "maximum": 300_000},
}


def _outbound(ctx: NodeContext, config: dict[str, Any]) -> Outbound:
    url = config.get("url")
    if not isinstance(url, str) or not url:
        raise PeerFailure("validation_error", "The peer URL is missing.", {"field": "url"})
    tenant_slug, _ = split_bound_id(ctx.run_id)
    tenant = Tenant.objects.get(slug=tenant_slug)
    run = Run.objects.for_tenant(tenant).get(run_id=ctx.run_id)
    authorization, credential_origin, card_trust = None, None, CardTrust()
    if isinstance(config.get("credentialId"), str):
        try:
            credential = peer_credential_get(tenant_slug=tenant_slug, credential_id=config["credentialId"])
        except NotFound:
            raise PeerFailure("not_found", "No such peer credential.", {"field": "credentialId"}) from None
        if credential.origin != peer_origin_of(url):
            # A credential goes only to the origin it was registered for.
            raise PeerFailure("forbidden", "The credential is not registered for this peer.", {"field": "credentialId"})
        authorization, credential_origin = peer_authorization(credential), credential.origin
        card_trust = CardTrust(policy=credential.card_signature_policy, pinned_key=credential.pinned_card_key)
    return Outbound(
        run=run,
        peer_url=url,
        authorization=authorization,
        credential_origin=credential_origin,
        timeout_seconds=int(config.get("timeoutMs", DEFAULT_TIMEOUT_MS)) / 1000,
        heartbeat=ctx.heartbeat,
        cancel_requested=ctx.cancel_requested,
        card_trust=card_trust,
    )


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class _PeerCallNode(NodeKind):
    # Only the conformance seams' kinds probe (outbound.negotiate): a workflow's node never puts a
    # version the decision table refused on the wire.
    probe: ClassVar[bool] = False

    def execute(self, ctx: NodeContext) -> NodeResult:
        config = render_config(dict(ctx.config), ctx.inputs)
        try:
            if self.probe and not conformance_seams_on():
                raise PeerFailure("forbidden", "This node kind serves the conformance seams only.")
            return Completed(outputs=self.call(_outbound(ctx, config), config))
        except PeerCancelled:
            return CancelObserved()
        except PeerFailure as failure:
            return Failed(code=failure.code, message=failure.message, details=failure.details or None)

    def version_request(self, config: dict[str, Any]) -> tuple[str | None, bool]:
        """(the version to ask for, whether to probe with it)."""
        if self.probe and (forced := _optional_str(config.get("requestVersion"))):
            return forced, True
        return _optional_str(config.get("version")), False

    def call(self, outbound: Outbound, config: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


def _config_schema(**properties: Any) -> dict[str, Any]:
    """A peer call kind's config: the members every kind has and its own; `url` is required."""
    return {
        "type": "object",
        "properties": {**_COMMON, **properties},
        "required": ["url"],
        "additionalProperties": False,
    }


def _seam_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A seam kind's config: its workflow kind's, plus the seam's `requestVersion`."""
    properties = {**schema["properties"], "requestVersion": _COMMON["version"]}
    return {**schema, "properties": properties}


@register_node_kind
class A2ACallNode(_PeerCallNode):
    """Sends `text` and/or `data` to the peer agent; outputs `{negotiatedVersion, peerDigest, result}`."""

    kind = "a2a.call"
    config_schema: ClassVar[dict[str, Any]] = _config_schema(text={"type": "string"}, data={})

    def call(self, outbound: Outbound, config: dict[str, Any]) -> dict[str, Any]:
        text = config.get("text")
        requested, probe = self.version_request(config)
        return a2a_call(
            outbound,
            requested=requested,
            text=text if isinstance(text, str) else None,
            data=config.get("data"),
            probe=probe,
        )


@register_node_kind
class McpCallNode(_PeerCallNode):
    """Calls `tool` with `arguments` on the peer MCP server (or only negotiates, without a tool);
    `elicitationAnswer` (an ElicitResult) answers the peer's elicitation rounds."""

    kind = "mcp.call"
    config_schema: ClassVar[dict[str, Any]] = _config_schema(
        tool={"type": "string", "minLength": 1, "maxLength": 256},
        arguments={"type": ["object", "string"]},
        elicitationAnswer={"type": ["object", "string"]},
    )

    def call(self, outbound: Outbound, config: dict[str, Any]) -> dict[str, Any]:
        arguments = config.get("arguments")
        answer = config.get("elicitationAnswer")
        requested, probe = self.version_request(config)
        return mcp_call(
            outbound,
            requested=requested,
            probe=probe,
            tool=_optional_str(config.get("tool")),
            arguments=arguments if isinstance(arguments, dict) else {},
            elicitation_answer=answer if isinstance(answer, dict) else None,
        )


@register_node_kind
class SeamA2ACallNode(A2ACallNode):
    """`a2a.call` for the §22 invoke seam: the same client, plus `requestVersion` (a version above
    the floor is sent as asked, to see the peer refuse it). Fails `forbidden` with the seams off."""

    kind = "openwop-host.seam.a2a-call"
    probe = True
    config_schema: ClassVar[dict[str, Any]] = _seam_schema(A2ACallNode.config_schema)


@register_node_kind
class SeamMcpCallNode(McpCallNode):
    """`mcp.call` for the §23 invoke seam, with `requestVersion` as `SeamA2ACallNode` has it."""

    kind = "openwop-host.seam.mcp-call"
    probe = True
    config_schema: ClassVar[dict[str, Any]] = _seam_schema(McpCallNode.config_schema)


def binding_outbound(ctx: NodeContext, protocol: str, binding_id: str) -> Outbound:
    """The Outbound to the tenant's peer binding `binding_id`: its URL and its credential, if it
    has one. An unknown binding fails the node `not_found` (host-services.md §mcp)."""
    tenant_slug, _ = split_bound_id(ctx.run_id)
    tenant_pk = Tenant.objects.filter(slug=tenant_slug).values_list("pk", flat=True).get()
    try:
        binding = peer_binding_get(tenant_pk=tenant_pk, protocol=protocol, binding_id=binding_id)
    except NotFound:
        details = {"bindingId": binding_id}
        raise PeerFailure("not_found", f"No {protocol} peer is bound to {binding_id!r}.", details) from None
    config: dict[str, Any] = {"url": binding.url}
    if binding.credential is not None:
        config["credentialId"] = binding.credential.credential_id
    return _outbound(ctx, config)


@register_node_kind
class McpClientNode(NodeKind):
    """`ctx.mcp.<method>` (host-services.md §mcp, RFC 0204): calls `method` (callTool, listTools,
    readResource, serverHealth) on the MCP server bound to `serverId` and completes with
    `outputs.result` = the server's result unaltered. Every config value may be a `{{input}}`
    placeholder (the conformance fixture takes them all from the run's inputs, `defaults` filling
    what they leave out); an absent method is serverHealth. An unknown serverId fails the node
    `not_found`; a tool error is a result."""

    kind = "mcp.client"
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "method": {"type": "string", "minLength": 1},
            "serverId": {"type": "string", "minLength": 1, "maxLength": 128},
            "name": {"type": "string"},
            "arguments": {"type": ["object", "string"]},
            "cursor": {"type": "string"},
            "uri": {"type": "string"},
            "timeoutMs": {"type": "integer", "minimum": 100, "maximum": 300_000},
            # Values for members whose placeholder the run's inputs left empty (a fixture's defaults).
            "defaults": {
                "type": "object",
                "properties": {"method": {"type": "string"}, "serverId": {"type": "string"}},
                "additionalProperties": False,
            },
        },
        "required": ["serverId"],
        "additionalProperties": False,
    }

    def execute(self, ctx: NodeContext) -> NodeResult:
        config = render_config(dict(ctx.config), ctx.inputs)
        for member, value in (ctx.config.get("defaults") or {}).items():
            if config.get(member) in (None, ""):
                config[member] = value
        method = config.get("method") or "serverHealth"
        server_id = config.get("serverId")
        if method not in CTX_MCP_METHODS:
            message = f"ctx.mcp has no method {method!r}."
            return Failed(code="validation_error", message=message, details={"field": "method"})
        if not isinstance(server_id, str) or not server_id:
            message = "serverId names a bound MCP server."
            return Failed(code="validation_error", message=message, details={"field": "serverId"})
        arguments = config.get("arguments")
        try:
            outbound = binding_outbound(ctx, "mcp", server_id)
            if isinstance(config.get("timeoutMs"), int):
                outbound = replace(outbound, timeout_seconds=config["timeoutMs"] / 1000)
            result = mcp_ctx_call(
                outbound,
                method=method,
                name=_optional_str(config.get("name")),
                arguments=arguments if isinstance(arguments, dict) else None,
                cursor=_optional_str(config.get("cursor")),
                uri=_optional_str(config.get("uri")),
            )
        except PeerCancelled:
            return CancelObserved()
        except PeerFailure as failure:
            return Failed(code=failure.code, message=failure.message, details=failure.details or None)
        return Completed(outputs={"result": result})
