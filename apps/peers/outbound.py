"""What every outbound A2A/MCP exchange shares: who is calling (a run), with which credential and
trace context, the JSON-over-HTTPS leg through the egress guard, and negotiation as a client.

interop.md §Negotiation: the version is decided before any version is put on the wire, so a
version below the floor is never sent; the peer's offers then settle it, and every outcome,
refusals included, is one `negotiation.decided` on the calling run's log.

The one exception is the conformance seam's `requestVersion` (host-sample-test-seams §22/§23:
"used to force an unsupported one"): a version ABOVE the floor that the table would refuse is put
on the wire as asked, so the suite can watch the peer refuse it; the peer's answer then settles
the record. Below the floor nothing is ever sent. Workflow node kinds never probe.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from apps.core.egress import EgressRefused, sanitize_url
from apps.core.egress_transport import EgressResponse, egress_request
from apps.core.errors import vendor_code
from apps.core.protocol_versions import Protocol, is_valid_version, version_key
from apps.facets.negotiation import (
    Decision,
    NegotiationRefused,
    negotiation_decide,
    negotiation_precheck,
    negotiation_record,
    peer_origin_digest,
)
from apps.peers.selectors import peer_origin_of
from apps.runs.models import Run
from apps.runs.trace_context import traceparent_child

logger = logging.getLogger(__name__)

MAX_PEER_BODY_BYTES = 1024 * 1024
HEARTBEAT_SECONDS = 1.0


# Failures the error registry has no row for (errors.json): vendor codes with their statuses. No
# registered row means these: runner_unavailable is a self-hosted runner's absence, run_timeout the
# run's own deadline, internal_error a fault of this host; a peer's failure is none of them.
PEER_UNREACHABLE = vendor_code("peer_unreachable", 502)  # no answer: connect/TLS/read failed
PEER_URL_REJECTED = vendor_code("peer_url_rejected", 400)  # the egress guard refused the URL
PEER_ERROR = vendor_code("peer_error", 502)  # the peer answered with a (non-version) error
PEER_PROTOCOL_ERROR = vendor_code("peer_protocol_error", 502)  # the peer's answer is not the protocol
PEER_TIMEOUT = vendor_code("peer_timeout", 504)  # the peer's task did not end within timeoutMs
# The peer's agent card fails its credential's cardSignaturePolicy: nothing was sent.
PEER_CARD_UNSIGNED = vendor_code("peer_card_unsigned", 502)  # policy `require`, card has no signatures
PEER_CARD_SIGNATURE_INVALID = vendor_code("peer_card_signature_invalid", 502)  # no signature verifies
# The peer (its card) names an endpoint on another origin than the credential's; the
# credential goes only to the origin it was registered for, so nothing is sent there.
PEER_ENDPOINT_ORIGIN_MISMATCH = vendor_code("peer_endpoint_origin_mismatch", 502)


class PeerFailure(Exception):
    """The exchange failed; the calling node fails with this error (code, message, details)."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.details = code, message, details or {}


class PeerCancelled(Exception):
    """The run was cancelled while its peer call was in flight: the node stops, the run ends cancelled."""


@dataclass(frozen=True)
class CardTrust:
    """What the peer's agent card must prove (the credential's `cardSignaturePolicy`), and the
    public JWK the operator pinned for it, if any. Without a credential: verify-if-present."""

    policy: str = "verify-if-present"
    pinned_key: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Outbound:
    """One outbound exchange on behalf of `run`."""

    run: Run
    peer_url: str
    authorization: str | None  # the tenant's registered credential for this origin, or None
    credential_origin: str | None = None  # the origin `authorization` was registered for
    timeout_seconds: float = 30.0
    heartbeat: Callable[[], None] = lambda: None
    cancel_requested: Callable[[], bool] = lambda: False
    card_trust: CardTrust = CardTrust()
    traceparent: str = field(init=False)

    def __post_init__(self) -> None:
        # interop.md §Trace context: the peer joins the run's trace (same trace id, our own span).
        object.__setattr__(self, "traceparent", traceparent_child(self.run.traceparent))

    @property
    def authenticated(self) -> bool:
        """The host presents its own outbound identity only with a registered credential."""
        return self.authorization is not None

    @property
    def peer_digest(self) -> str:
        return peer_origin_digest(self.peer_url)

    def trace_fields(self) -> dict[str, str]:
        fields = {"traceparent": self.traceparent}
        if self.run.tracestate:
            fields["tracestate"] = self.run.tracestate
        return fields


@dataclass(frozen=True)
class PeerReply:
    status: int
    document: Any  # the JSON body (the last JSON-RPC message of an SSE stream), or None


def _json_from(body: bytes, content_type: str) -> Any:
    if content_type.startswith("text/event-stream"):
        # Streamable HTTP may answer as SSE: the response is the last message that has an id.
        last: Any = None
        for line in body.decode("utf-8", "replace").splitlines():
            if line.startswith("data:"):
                try:
                    message = json.loads(line[5:].strip())
                except ValueError:
                    continue
                if isinstance(message, dict) and "id" in message:
                    last = message
        return last
    try:
        return json.loads(body)
    except ValueError:
        return None


def peer_send(outbound: Outbound, method: str, url: str, *, headers: Mapping[str, str], body: Any = None) -> PeerReply:
    """One HTTP exchange with the peer, through the egress guard (resolve, check, pin, no redirects)."""
    credential_origin_check(outbound, url)
    outbound.heartbeat()
    sent = dict(headers)
    if outbound.authorization is not None:
        sent["Authorization"] = outbound.authorization
    content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
    if content is not None:
        sent.setdefault("Content-Type", "application/json")
    timeout = httpx.Timeout(outbound.timeout_seconds, connect=min(outbound.timeout_seconds, 5.0))
    try:
        response = _while_heartbeating(
            outbound,
            lambda: egress_request(
                method, url, headers=sent, content=content, timeout=timeout, max_body_bytes=MAX_PEER_BODY_BYTES
            ),
        )
    except EgressRefused as exc:
        raise PeerFailure(PEER_URL_REJECTED, "The egress guard refused the peer.", {"reason": exc.reason}) from None
    if response.status_code is None:
        logger.info("peer %s %s: %s", method, sanitize_url(url), response.error)
        raise PeerFailure(PEER_UNREACHABLE, "The peer did not answer.", {"reason": response.error})
    if response.body_truncated:
        raise PeerFailure(PEER_PROTOCOL_ERROR, "The peer's answer is too large.")
    content_type = str(response.headers.get("content-type", ""))
    return PeerReply(status=response.status_code, document=_json_from(response.body, content_type))


def credential_origin_check(outbound: Outbound, url: str) -> None:
    """A credential goes only to the origin it was registered for: a URL elsewhere (an
    endpoint the peer's card names) is refused before anything is sent, never sent without it."""
    if outbound.authorization is None:
        return
    try:
        origin: str | None = peer_origin_of(url)
    except ValueError:  # a port out of range: no origin, so not the credential's
        origin = None
    if origin is None or origin != outbound.credential_origin:
        details = {"credentialOrigin": outbound.credential_origin, **({"endpointOrigin": origin} if origin else {})}
        raise PeerFailure(
            PEER_ENDPOINT_ORIGIN_MISMATCH,
            "The peer names an endpoint on another origin than its credential's; nothing was sent there.",
            details,
        )


def _while_heartbeating(outbound: Outbound, send: Callable[[], EgressResponse]) -> EgressResponse:
    """Send in a helper thread while this one keeps the run's lease and watches for a cancel: a
    slow peer must not cost the run its lease (engine.py), and a cancel must not wait for it."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="peer-send")
    future = pool.submit(send)
    try:
        while True:
            try:
                return future.result(timeout=HEARTBEAT_SECONDS)
            except FutureTimeout:
                outbound.heartbeat()
                if outbound.cancel_requested():
                    # The request ends on its own (bounded by its timeout); its answer is discarded.
                    raise PeerCancelled from None
    finally:
        pool.shutdown(wait=False)


# --- negotiation as a client ----------------------------------------------------------------------


@dataclass(frozen=True)
class Agreement:
    """The outcome of negotiation: the table's accepted `decision` and the `version` the exchange
    now puts on the wire. They differ only for a seam probe (`probing`), whose `decision` is not
    yet recorded: the peer's answer to the probe settles it (`peer_refused_version`, or
    `probe_not_refused`)."""

    decision: Decision
    version: str
    probing: bool = False


def negotiate(
    outbound: Outbound,
    *,
    protocol: Protocol,
    requested: str | None,
    offers_of: Callable[[str], Sequence[str]],
    probe: bool = False,
) -> Agreement:
    """Agree a version with the peer. `offers_of(candidate)` asks the peer for its versions, naming
    `candidate` (the only version that ever goes on the wire before agreement).

    With `probe` (the conformance seam's `requestVersion` only), a `requested` version at or above
    the floor that the table refuses locally is still put on the wire; the table's own choice among
    the peer's offers then only picks the peer's endpoint."""
    tenant = outbound.run.tenant.slug  # the tenant's version policy binds its outbound exchanges too
    precheck = functools.partial(
        negotiation_precheck, protocol=protocol, authenticated=outbound.authenticated, tenant=tenant
    )
    pre = precheck(requested=requested, peer_offers=None)
    candidate = requested if requested is not None else pre.preferred
    probing = probe and not pre.accepted and _at_or_above_floor(protocol, candidate, pre.floor)
    if not pre.accepted and not probing:  # below the floor, or not ours: refused before a byte is sent
        _record(outbound, replace(pre, requested=candidate))
        raise _refused(outbound, replace(pre, requested=candidate))
    try:
        offers = list(offers_of(candidate))
    except PeerFailure:
        # No offers came: the exchange failed, and the record says so (outcome refused).
        _record(outbound, replace(pre, outcome="refused", reason="unsupported", version=None, requested=candidate))
        raise
    if probing:
        decision = replace(precheck(requested=None, peer_offers=offers), requested=candidate)
        if not decision.accepted:  # no endpoint of the peer we could reach at all
            _record(outbound, decision)
            raise _refused(outbound, decision)
        return Agreement(decision, candidate, probing=True)
    decision = negotiation_decide(
        protocol=protocol,
        requested=candidate,
        peer_origin=outbound.peer_url,
        subject=None,
        run=outbound.run,
        peer_offers=offers,
        authenticated=outbound.authenticated,
        tenant=tenant,
    )
    if not decision.accepted:
        raise _refused(outbound, decision)
    assert decision.version is not None
    return Agreement(decision, decision.version)


def _at_or_above_floor(protocol: Protocol, version: str, floor: str) -> bool:
    return is_valid_version(protocol, version) and version_key(protocol, version) >= version_key(protocol, floor)


@contextlib.contextmanager
def probe_settled(outbound: Outbound, agreement: Agreement) -> Iterator[None]:
    """Around a probe's exchange: a failure other than the peer's version refusal (which records
    itself) still leaves the probe's one refused record, so no outcome goes unrecorded."""
    try:
        yield
    except PeerFailure as failure:
        if agreement.probing and failure.code != NegotiationRefused.code:
            _record(outbound, _as_refused(agreement.decision))
        raise


def probe_not_refused(outbound: Outbound, agreement: Agreement) -> PeerFailure:
    """The peer answered a probe at a version this host does not speak without refusing it: the
    host still cannot use that answer, so the exchange is refused (recorded) and nothing is kept."""
    failure = peer_refused_version(outbound, agreement.decision)
    failure.details["peerAccepted"] = True
    return failure


def peer_refused_version(outbound: Outbound, decision: Decision, supported: Sequence[str] = ()) -> PeerFailure:
    """The peer refused the agreed version after all (A2A -32009, MCP -32022): recorded as refused."""
    refused = _as_refused(decision)
    _record(outbound, refused)
    failure = _refused(outbound, refused)
    if supported:
        failure.details["peerSupported"] = [str(v) for v in supported][:20]
    return failure


def _as_refused(decision: Decision) -> Decision:
    return replace(decision, outcome="refused", reason="unsupported", version=None)


def _record(outbound: Outbound, decision: Decision) -> None:
    negotiation_record(decision, peer_origin=outbound.peer_url, subject=None, run=outbound.run)


def _refused(outbound: Outbound, decision: Decision) -> PeerFailure:
    error = NegotiationRefused(decision, run_id=outbound.run.run_id)
    return PeerFailure(error.code, error.message, dict(error.details or {}))


def peer_jsonrpc(
    outbound: Outbound, url: str, *, headers: Mapping[str, str], method: str, params: Any
) -> dict[str, Any]:
    """POST one JSON-RPC request (a fresh id each time) and return the response object."""
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    reply = peer_send(outbound, "POST", url, headers=headers, body=body)
    if not isinstance(reply.document, dict):
        details = {"status": reply.status}
        raise PeerFailure(PEER_PROTOCOL_ERROR, f"The peer's {method} answer is not JSON-RPC.", details)
    return reply.document
