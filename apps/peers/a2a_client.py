"""The host as an A2A 1.0 client: fetch the card naming our version, agree the highest common one
within [floor, preferred], send one message, follow its task to an end (reference b.2).

Wire shapes are a2a-sdk's protobuf types rendered with json_format; the HTTP goes through
`peer_send` (the egress guard), never through an SDK client with its own connection pool.
"""

from __future__ import annotations

import time
import uuid
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

from apps.peers.outbound import Outbound, PeerFailure, negotiate, peer_jsonrpc, peer_refused_version, peer_send

CARD_PATH = "/.well-known/agent-card.json"
VERSION_NOT_SUPPORTED = -32009
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
_ENDED = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
          TaskState.TASK_STATE_REJECTED}
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
    metadata = info.get("metadata") if isinstance(info.get("metadata"), dict) else {}
    raw = metadata.get("supportedVersions") or info.get("supportedVersions") or ""
    supported = raw.split(",") if isinstance(raw, str) else [str(v) for v in raw] if isinstance(raw, list) else []
    return reason, [v.strip() for v in supported if v.strip()]


def _message(outbound: Outbound, *, text: str | None, data: Any) -> Message:
    metadata = Struct()
    # interop.md §Trace context: the in-message carrier, which a receiver prefers.
    metadata.update({"openwop": outbound.trace_fields()})
    parts = []
    if data is not None:
        parts.append(Part(data=json_format.ParseDict(data, Value())))
    if text is not None or not parts:
        parts.append(Part(text=text or ""))
    return Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=parts, metadata=metadata)


def a2a_call(outbound: Outbound, *, requested: str | None, text: str | None, data: Any) -> dict[str, Any]:
    """One exchange; returns `{negotiatedVersion, peerDigest, result: {task}|{message}}`."""
    card_holder: dict[str, AgentCard | None] = {}

    def offers_of(candidate: str) -> list[str]:
        reply = peer_send(outbound, "GET", card_url_of(outbound.peer_url),
                          headers={"A2A-Version": candidate, "Accept": "application/json"})
        if reply.status != 200 or not isinstance(reply.document, dict):
            raise PeerFailure("peer_protocol_error", "The peer's agent card could not be read.",
                              {"status": reply.status})
        offers, card_holder["card"] = card_offers(reply.document)
        return offers

    decision = negotiate(outbound, protocol="a2a", requested=requested, offers_of=offers_of)
    version = decision.version
    assert version is not None
    card = card_holder.get("card")
    endpoint = next(
        (i.url for i in (card.supported_interfaces if card else [])
         if major_minor(i.protocol_version) == version and i.protocol_binding.upper() == "JSONRPC" and i.url),
        None,
    )
    if endpoint is None:
        raise PeerFailure("peer_protocol_error", f"The peer's card lists no JSON-RPC interface for A2A {version}.")
    request = SendMessageRequest(message=_message(outbound, text=text, data=data))
    result = _rpc(outbound, endpoint, version, decision, "SendMessage", json_format.MessageToDict(request))
    response = _parsed(result, SendMessageResponse())
    if response.HasField("task"):
        task = _follow(outbound, endpoint, version, decision, _checked(response.task))
        doc: dict[str, Any] = {"task": json_format.MessageToDict(task)}
    elif response.HasField("message"):
        doc = {"message": json_format.MessageToDict(response.message)}
    else:
        raise PeerFailure("peer_protocol_error", "The peer's SendMessage answer is neither a task nor a message.")
    return {"negotiatedVersion": version, "peerDigest": outbound.peer_digest, "result": doc}


def _follow(outbound: Outbound, endpoint: str, version: str, decision: Any, task: Task) -> Task:
    """Poll GetTask until the task ends or needs input we cannot give, within the timeout."""
    deadline = time.monotonic() + outbound.timeout_seconds
    while task.status.state not in _ENDED | _NEEDS_INPUT:
        if outbound.cancel_requested():
            raise PeerFailure("cancelled", "The run was cancelled while its peer task was running.")
        if time.monotonic() > deadline:
            raise PeerFailure("peer_timeout", "The peer's task did not end in time.", {"taskId": task.id})
        time.sleep(POLL_SECONDS)
        params = json_format.MessageToDict(GetTaskRequest(id=task.id))
        task = _checked(_parsed(_rpc(outbound, endpoint, version, decision, "GetTask", params), Task()))
    return task


def _checked(task: Task) -> Task:
    # Unknown enum values parse as UNSPECIFIED: a task we cannot follow is the peer's error.
    if not task.id or task.status.state == TaskState.TASK_STATE_UNSPECIFIED:
        raise PeerFailure("peer_protocol_error", "The peer's task has no id or no known state.")
    return task


def _parsed(result: dict[str, Any], message: ProtoT) -> ProtoT:
    """A peer's result as an a2a-sdk type; a shape the type refuses is the peer's protocol error."""
    try:
        return json_format.ParseDict(result, message, ignore_unknown_fields=True)
    except json_format.ParseError:
        raise PeerFailure("peer_protocol_error", f"The peer's {type(message).__name__} is not valid.") from None


def _rpc(outbound: Outbound, endpoint: str, version: str, decision: Any, method: str, params: Any) -> dict[str, Any]:
    headers = {"A2A-Version": version, "Accept": "application/json"}
    document = peer_jsonrpc(outbound, endpoint, headers=headers, method=method, params=params)
    error = document.get("error")
    if isinstance(error, dict):
        reason, supported = peer_error_reason(error)
        if error.get("code") == VERSION_NOT_SUPPORTED or reason == "VERSION_NOT_SUPPORTED":
            raise peer_refused_version(outbound, decision, supported)
        raise PeerFailure("peer_error", f"The peer refused {method}.",
                          {"code": error.get("code"), **({"reason": reason} if reason else {})})
    result = document.get("result")
    if not isinstance(result, dict):
        raise PeerFailure("peer_protocol_error", f"The peer's {method} answer has no result.")
    return result
