"""MRTR `requestState`: integrity-protected, caller-bound, short-lived, single-use.

SEP-2322 makes `requestState` attacker input. Ours is `<payload>.<mac>` (base64url): the payload
binds the Subject, the tool name and a digest of its arguments, the run, the interrupt, the round
and an expiry; the MAC is HMAC-SHA256 under a key derived from SECRET_KEY for this purpose alone.
Redeeming it inserts its nonce into a unique table, so a replay fails like a forgery (interop map
c.6 `mcp.mrtr`; openwop-v2 reference a.6).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac
from django.utils.http import urlsafe_base64_decode, urlsafe_base64_encode

from apps.mcp.errors import invalid_request_state
from apps.mcp.models import RequestStateNonce
from apps.tenants.models import Tenant
from apps.tenants.subject import Subject

_PURPOSE = "openwop.mcp.requestState.v1"
REQUEST_STATE_TTL = dt.timedelta(minutes=15)


@dataclass(frozen=True, slots=True)
class RequestState:
    run_id: str
    interrupt_ids: tuple[str, ...]  # what the round asked: one interrupt, or a parallel node's several
    round: int
    nonce: str
    expires_at: dt.datetime


def _mac(payload: str) -> str:
    return urlsafe_base64_encode(salted_hmac(_PURPOSE, payload, algorithm="sha256").digest())


def _subject_key(subject: Subject) -> str:
    return f"{subject.issuer}#{subject.tenant}#{subject.subject_id}"


def arguments_digest(tool: str, arguments: dict[str, Any]) -> str:
    """The originating request, as the state binds it: tool name + canonical JSON of its arguments."""
    canonical = json.dumps({"name": tool, "arguments": arguments}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def request_state_mint(
    *, subject: Subject, tool: str, arguments: dict[str, Any], run_id: str, interrupt_ids: Sequence[str], round: int
) -> str:
    expires_at = timezone.now() + REQUEST_STATE_TTL
    payload = {
        "v": 1,
        "sub": _subject_key(subject),
        "req": arguments_digest(tool, arguments),
        "run": run_id,
        "int": list(interrupt_ids),
        "rnd": round,
        "exp": int(expires_at.timestamp()),
        "n": secrets.token_urlsafe(24),
    }
    body = urlsafe_base64_encode(json.dumps(payload, separators=(",", ":")).encode("utf-8"))
    return f"{body}.{_mac(body)}"


def request_state_open(*, token: Any, subject: Subject, tool: str, arguments: dict[str, Any]) -> RequestState:
    """Verify a state for this caller and this exact request; every failure is the same error."""
    if not isinstance(token, str) or token.count(".") != 1 or len(token) > 4096:
        raise invalid_request_state()
    body, mac = token.split(".")
    if not hmac.compare_digest(mac, _mac(body)):
        raise invalid_request_state()
    try:
        payload = json.loads(urlsafe_base64_decode(body))
    except ValueError:
        raise invalid_request_state() from None
    expected = {"v": 1, "sub": _subject_key(subject), "req": arguments_digest(tool, arguments)}
    if not isinstance(payload, dict) or any(payload.get(k) != v for k, v in expected.items()):
        raise invalid_request_state()
    expires_at = dt.datetime.fromtimestamp(int(payload["exp"]), tz=dt.UTC)
    if expires_at <= timezone.now():
        raise invalid_request_state()
    return RequestState(
        run_id=str(payload["run"]),
        interrupt_ids=tuple(map(str, asked)) if isinstance(asked := payload["int"], list) else (str(asked),),
        round=int(payload["rnd"]),
        nonce=str(payload["n"]),
        expires_at=expires_at,
    )


def request_state_redeem(*, subject: Subject, state: RequestState) -> None:
    """Spend the state's nonce; a second redemption (a replay) is refused like a forgery. Called
    inside the transaction that applies the state's answer (tools._call_continue), so an answer
    that fails leaves the state unspent for the client's next retry."""
    tenant = Tenant.objects.get(slug=subject.tenant)
    try:
        with transaction.atomic():
            RequestStateNonce.objects.create(tenant=tenant, nonce=state.nonce, expires_at=state.expires_at)
    except IntegrityError:
        raise invalid_request_state() from None
    # Spent nonces past their expiry can never be presented again (the MAC check refuses them).
    RequestStateNonce.objects.for_tenant(tenant).filter(expires_at__lt=timezone.now()).delete()
