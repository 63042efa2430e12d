"""The host as an A2A 1.0 client: fetch the card naming our version, agree the highest common one
within [floor, preferred], send one message, follow its task to an end (reference b.2).

Wire shapes are a2a-sdk's protobuf types rendered with json_format; the HTTP goes through
`peer_send` (the egress guard), never through an SDK client with its own connection pool. The
card's signatures are checked (apps.peers.card_signatures) as soon as it is fetched, before its
offers or endpoints are used and before any message is sent.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any, TypeVar

from a2a.types import (
    AgentCard,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SendMessageResponse,
    Task,
    TaskState,
)
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.struct_pb2 import Struct, Value

from apps.peers.card_signatures import card_signatures_check
from apps.peers.outbound import (
    PEER_ERROR,
    PEER_PROTOCOL_ERROR,
    PEER_TIMEOUT,
    Agreement,
    Outbound,
    PeerCancelled,
    PeerFailure,
    negotiate,
    peer_jsonrpc,
    peer_refused_version,
    peer_send,
    probe_not_refused,
    probe_settled,
)

CARD_PATH = "/.well-known/agent-card.json"
VERSION_NOT_SUPPORTED = -32009
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
_ENDED = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}
_NEEDS_INPUT = {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}
POLL_SECONDS = 0.25
ProtoT = TypeVar("ProtoT", bound=ProtoMessage)


def card_url_of(peer_url: str) -> str:
    """The peer URL names the agent (its base) or its card directly."""
    return peer_url if peer_url.endswith(".json") else peer_url.rstrip("/") + CARD_PATH


def major_minor(version: object) -> str | None:
    """A2A versions are negotiated as major.minor; a 0.3 card says `0.3.0` (patches never are)."""
    if not isinstance(version, str):
        return None
    parts = version.strip().split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 and all(p.isdigit() for p in parts[:2]) else None


def card_offers(document: dict[str, Any]) -> tuple[list[str], AgentCard | None]:
    """The versions a card offers: its interfaces' protocolVersion (1.0), else the top-level
    protocolVersion of a 0.3 card."""
    card: AgentCard | None
    try:
        card = json_format.ParseDict(document, AgentCard(), ignore_unknown_fields=True)
    except json_format.ParseError:
        card = None
    offers = [v for i in (card.supported_interfaces if card else []) if (v := major_minor(i.protocol_version))]
    if not offers and (legacy := major_minor(document.get("protocolVersion"))):
        offers = [legacy]
    return sorted(set(offers)), card


def peer_error_reason(error: dict[str, Any]) -> tuple[str | None, list[str]]:
    """(ErrorInfo reason, supportedVersions) of a peer's JSON-RPC error. interop.md §A2A error
    details: `data` is an array of Any (find the ErrorInfo), or, through 2.x, a legacy object."""
    data = error.get("data")
    info: dict[str, Any] = {}
    if isinstance(data, list):
        info = next((d for d in data if isinstance(d, dict) and d.get("@type") == ERROR_INFO_TYPE), {})
    elif isinstance(data, dict):
        info = data
    reason = info.get("reason") if isinstance(info.get("reason"), str) else None
    metadata = info["metadata"] if isinstance(info.get("metadata"), dict) else {}
    raw = metadata.get("supportedVersions") or info.get("supportedVersions") or ""
    supported = raw.split(",") if isinstance(raw, str) else [str(v) for v in raw] if isinstance(raw, list) else []
    return reason, [v.strip() for v in supported if v.strip()]


def _message(
    outbound: Outbound, *, text: str | None, data: Any, permitted_purposes: list[str] | None = None
) -> Message:
    metadata = Struct()
    # interop.md §Trace context: the in-message carrier, which a receiver prefers.
    openwop: dict[str, Any] = dict(outbound.trace_fields())
    if permitted_purposes is not None:
        # security-defaults.md §Onward hops: the label the data came with goes on with it.
        openwop["permittedPurposes"] = list(permitted_purposes)
    metadata.update({"openwop": openwop})
    parts = []
    if data is not None:
        parts.append(Part(data=json_format.ParseDict(data, Value())))
    if text is not None or not parts:
        parts.append(Part(text=text or ""))
    return Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=parts, metadata=metadata)


def a2a_call(
    outbound: Outbound,
    *,
    requested: str | None,
    text: str | None,
    data: Any,
    probe: bool = False,
    permitted_purposes: list[str] | None = None,
) -> dict[str, Any]:
    """One exchange; returns `{negotiatedVersion, peerDigest, result: {task}|{message}}`.

    `probe` (conformance seam only): a `requested` version above the floor that we do not speak is
    sent on SendMessage as asked, to the JSON-RPC interface the table picks, to see the peer refuse."""
    card_holder: dict[str, AgentCard | None] = {}

    def offers_of(candidate: str) -> list[str]:
        card_url = card_url_of(outbound.peer_url)
        reply = peer_send(outbound, "GET", card_url, headers={"A2A-Version": candidate, "Accept": "application/json"})
        if reply.status != 200 or not isinstance(reply.document, dict):
            raise PeerFailure(PEER_PROTOCOL_ERROR, "The peer's agent card could not be read.", {"status": reply.status})
        offers, card = card_offers(reply.document)
        # The card is trusted (its offers, its endpoint) only once its signatures pass
        # the credential's policy; a refusal fails the node before any message is sent.
        card_signatures_check(
            trust=outbound.card_trust,
            tenant=str(outbound.run.tenant_id),
            card_url=card_url,
            document=reply.document,
            card=card,
            fetch_jwks=lambda jku: _jwks_of(outbound, jku),
        )
        card_holder["card"] = card
        return offers

    agreement = negotiate(outbound, protocol="a2a", requested=requested, offers_of=offers_of, probe=probe)
    card = card_holder.get("card")
    with probe_settled(outbound, agreement):
        endpoint = _jsonrpc_endpoint(card, agreement.decision.version)
        message = _message(outbound, text=text, data=data, permitted_purposes=permitted_purposes)
        request = SendMessageRequest(message=message)
        result = _rpc(outbound, endpoint, agreement, "SendMessage", json_format.MessageToDict(request))
    if agreement.probing:  # the peer took a version we do not speak: its answer is not ours to read
        raise probe_not_refused(outbound, agreement)
    version = agreement.version
    response = _parsed(result, SendMessageResponse())
    if response.HasField("task"):
        task = _follow(outbound, endpoint, agreement, _checked(response.task))
        doc: dict[str, Any] = {"task": json_format.MessageToDict(task)}
    elif response.HasField("message"):
        doc = {"message": json_format.MessageToDict(response.message)}
    else:
        raise PeerFailure(PEER_PROTOCOL_ERROR, "The peer's SendMessage answer is neither a task nor a message.")
    return {"negotiatedVersion": version, "peerDigest": outbound.peer_digest, "result": doc}


def _jwks_of(outbound: Outbound, jku: str) -> Any:
    """The JWKS at `jku` (already checked to be on the card's origin), through the egress guard.
    Public material: fetched without the peer credential."""
    reply = peer_send(replace(outbound, authorization=None), "GET", jku, headers={"Accept": "application/json"})
    return reply.document if reply.status == 200 else None


def _jsonrpc_endpoint(card: AgentCard | None, version: str | None) -> str:
    """The JSON-RPC interface the card lists for the agreed version. It may be on another origin;
    then `peer_send` refuses to carry the credential there (peer_endpoint_origin_mismatch)."""
    for interface in card.supported_interfaces if card else []:
        if (
            major_minor(interface.protocol_version) == version
            and interface.protocol_binding.upper() == "JSONRPC"
            and interface.url
        ):
            return str(interface.url)
    raise PeerFailure(PEER_PROTOCOL_ERROR, f"The peer's card lists no JSON-RPC interface for A2A {version}.")


def _follow(outbound: Outbound, endpoint: str, agreement: Agreement, task: Task) -> Task:
    """Poll GetTask until the task ends or needs input we cannot give, within the timeout."""
    deadline = time.monotonic() + outbound.timeout_seconds
    while task.status.state not in _ENDED | _NEEDS_INPUT:
        if outbound.cancel_requested():
            raise PeerCancelled
        if time.monotonic() > deadline:
            raise PeerFailure(PEER_TIMEOUT, "The peer's task did not end in time.", {"taskId": task.id})
        time.sleep(POLL_SECONDS)
        params = json_format.MessageToDict(GetTaskRequest(id=task.id))
        task = _checked(_parsed(_rpc(outbound, endpoint, agreement, "GetTask", params), Task()))
    return task


def _checked(task: Task) -> Task:
    # Unknown enum values parse as UNSPECIFIED: a task we cannot follow is the peer's error.
    if not task.id or task.status.state == TaskState.TASK_STATE_UNSPECIFIED:
        raise PeerFailure(PEER_PROTOCOL_ERROR, "The peer's task has no id or no known state.")
    return task


def _parsed(result: dict[str, Any], message: ProtoT) -> ProtoT:
    """A peer's result as an a2a-sdk type; a shape the type refuses is the peer's protocol error."""
    try:
        return json_format.ParseDict(result, message, ignore_unknown_fields=True)
    except json_format.ParseError:
        raise PeerFailure(PEER_PROTOCOL_ERROR, f"The peer's {type(message).__name__} is not valid.") from None


def _rpc(outbound: Outbound, endpoint: str, agreement: Agreement, method: str, params: Any) -> dict[str, Any]:
    headers = {"A2A-Version": agreement.version, "Accept": "application/json"}
    document = peer_jsonrpc(outbound, endpoint, headers=headers, method=method, params=params)
    error = document.get("error")
    if isinstance(error, dict):
        reason, supported = peer_error_reason(error)
        if error.get("code") == VERSION_NOT_SUPPORTED or reason == "VERSION_NOT_SUPPORTED":
            raise peer_refused_version(outbound, agreement.decision, supported)
        raise PeerFailure(
            PEER_ERROR,
            f"The peer refused {method}.",
            {"code": error.get("code"), **({"reason": reason} if reason else {})},
        )
    result = document.get("result")
    if not isinstance(result, dict):
        raise PeerFailure(PEER_PROTOCOL_ERROR, f"The peer's {method} answer has no result.")
    return result
