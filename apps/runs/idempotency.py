"""`Idempotency-Key` (headers.md; idempotency.md Layer 1): (tenant, endpoint, key) -> the first
response, kept 24 h.

Two phases. `idempotency_claim` commits an in-flight record on its own, so a concurrent duplicate
sees it and gets 409 idempotency_in_flight. The operation then completes the record inside its
own transaction (`idempotency_complete`), so either the effect and the record commit together or
neither does: a replay can never find a completed record without its run, nor a run twice.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.core.errors import Conflict, OpenWopError
from apps.runs.models import IdempotencyRecord, IdempotencyState, Run
from apps.tenants.models import Tenant
from apps.tenants.selectors import subject_tenant_pk
from apps.tenants.subject import Subject

IDEMPOTENCY_TTL = timedelta(hours=24)
# An in-flight claim older than this belongs to a request that died: the next duplicate takes over.
IN_FLIGHT_STALE_AFTER = timedelta(seconds=60)
# Printable ASCII without spaces, 1-255 characters.
IDEMPOTENCY_KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")


class IdempotencyKeyInvalid(OpenWopError):
    code = "idempotency_key_invalid"
    default_message = "Idempotency-Key must be 1-255 printable ASCII characters without spaces."


@dataclass(frozen=True)
class IdempotencyClaim:
    tenant_pk: int
    record_pk: int
    claim_token: str


@dataclass(frozen=True)
class IdempotentReplay:
    status: int
    body: dict[str, Any]
    run: Run | None


def request_digest(*, endpoint: str, body: Any) -> str:
    canonical = json.dumps([endpoint, body], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def idempotency_claim(
    *, tenant: Tenant | int, endpoint: str, key: str, digest: str
) -> IdempotencyClaim | IdempotentReplay:
    """Claim `key` for this request, or answer with the replay / the 409 the protocol asks for."""
    if not IDEMPOTENCY_KEY_RE.match(key):
        raise IdempotencyKeyInvalid(details={"header": "Idempotency-Key"})
    tenant_pk = tenant.pk if isinstance(tenant, Tenant) else tenant
    now = timezone.now()
    token = secrets.token_hex(16)
    with transaction.atomic(durable=True):
        records = IdempotencyRecord.objects.for_tenant(tenant_pk).select_for_update(of=("self",))
        record = records.filter(endpoint=endpoint, key=key).select_related("run").first()
        if record is not None and record.expires_at <= now:
            record.delete()  # past its 24 h: the key is free again
            record = None
        if record is None:
            try:
                with transaction.atomic():
                    record = IdempotencyRecord.objects.create(
                        tenant_id=tenant_pk,
                        endpoint=endpoint,
                        key=key,
                        request_digest=digest,
                        claim_token=token,
                        created_at=now,
                        expires_at=now + IDEMPOTENCY_TTL,
                    )
            except IntegrityError as exc:
                # PostgreSQL: a concurrent request inserted the same key and committed first.
                raise _in_flight() from exc
            return IdempotencyClaim(tenant_pk=tenant_pk, record_pk=record.pk, claim_token=token)
        if record.request_digest != digest:
            raise Conflict(
                "idempotency_key_mismatch",
                "This Idempotency-Key was used with a different request body.",
                details={"header": "Idempotency-Key"},
            )
        if record.state == IdempotencyState.COMPLETED:
            return IdempotentReplay(
                status=record.response_status or 200, body=record.response_body or {}, run=record.run
            )
        if record.created_at > now - IN_FLIGHT_STALE_AFTER:
            raise _in_flight()
        record.claim_token, record.created_at = token, now
        record.save(update_fields=["claim_token", "created_at"])
        return IdempotencyClaim(tenant_pk=tenant_pk, record_pk=record.pk, claim_token=token)


T = TypeVar("T")


def idempotency_run(
    *, subject: Subject, endpoint: str, key: str, request_body: Any, perform: Callable[[IdempotencyClaim], T]
) -> T | IdempotentReplay:
    """Claim `key`, then `perform(claim)` (which completes the claim in its own transaction), or
    answer the replay. A failed operation frees the key, so a corrected request may reuse it."""
    claim = idempotency_claim(
        tenant=subject_tenant_pk(subject),
        endpoint=endpoint,
        key=key,
        digest=request_digest(endpoint=endpoint, body=request_body),
    )
    if isinstance(claim, IdempotentReplay):
        return claim
    try:
        return perform(claim)
    except BaseException:
        idempotency_release(claim=claim)
        raise


def idempotency_complete(*, claim: IdempotencyClaim, run: Run | None, status: int, body: dict[str, Any]) -> None:
    """Record the response. Called inside the operation's transaction; refuses a lost claim."""
    updated = (
        IdempotencyRecord.objects.for_tenant(claim.tenant_pk)
        .filter(pk=claim.record_pk, claim_token=claim.claim_token, state=IdempotencyState.IN_FLIGHT)
        .update(state=IdempotencyState.COMPLETED, run=run, response_status=status, response_body=body)
    )
    if updated != 1:
        raise _in_flight()


def idempotency_release(*, claim: IdempotencyClaim) -> None:
    """Forget a claim whose operation failed, so a corrected request may reuse the key."""
    with transaction.atomic(durable=True):
        IdempotencyRecord.objects.for_tenant(claim.tenant_pk).filter(
            pk=claim.record_pk, claim_token=claim.claim_token, state=IdempotencyState.IN_FLIGHT
        ).delete()


def idempotency_records_purge() -> int:
    """Delete records past their 24 h (a maintenance job across tenants)."""
    with transaction.atomic(durable=True):
        deleted, _ = IdempotencyRecord.unscoped_all_tenants.filter(expires_at__lte=timezone.now()).delete()
    return deleted


def _in_flight() -> Conflict:
    return Conflict(
        "idempotency_in_flight",
        "A request with this Idempotency-Key is still being processed.",
        details={"header": "Idempotency-Key"},
    )
