"""Writes for trusted issuers: add, update, remove (validated, audited in the same transaction), and
the refresh of an issuer's metadata and keys (operational data, not audited).

Every path that writes an issuer (admin, `manage.py oauth_issuer`, code) calls these. An add, or a
change of the issuer URL or lane, fetches the metadata and JWKS through the egress guard first and
refuses the change if they cannot be fetched or are not the issuer's own (apps/oauth/documents.py).
The table's trigger empties the Subject and card caches of every process (migration 0002); this
process drops its own on commit too.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.core.errors import NotFound, ValidationFailed
from apps.core.invalidation import TOPIC_APIKEY, TOPIC_CARD, invalidate_on_commit
from apps.core.sealing import seal, unseal
from apps.oauth.documents import IssuerDocuments, IssuerUnreachable, issuer_documents_fetch
from apps.oauth.models import TrustedIssuer, TrustedIssuerChange
from apps.oauth.validation import (
    ISSUER_FIELD_DEFAULTS,
    ISSUER_FIELDS,
    errors_message,
    issuer_errors,
    metadata_errors,
)
from apps.tenants.models import Tenant

logger = logging.getLogger(__name__)

# apps.core.sealing: introspection client secrets have their own purpose.
OAUTH_INTROSPECTION_SECRET = b"openwop.oauth.introspection.v1"
REDACTED = "(set)"


def introspection_secret(issuer: TrustedIssuer) -> str:
    """The issuer's introspection client secret in clear ("" when none), for the request only."""
    if not issuer.introspection_client_secret:
        return ""
    return unseal(issuer.introspection_client_secret.encode("ascii"), purpose=OAUTH_INTROSPECTION_SECRET)


def _sealed(secret: str) -> str:
    return seal(secret, purpose=OAUTH_INTROSPECTION_SECRET).decode("ascii") if secret else ""


def issuer_fields(issuer: TrustedIssuer | None) -> dict[str, Any] | None:
    """The row as its audit records show it: JSON, tenants by slug, the secret only as set/unset."""
    if issuer is None:
        return None
    allowed = sorted(t.slug for t in issuer.allowed_tenants.all()) if issuer.pk is not None else []
    return {
        "issuer": issuer.issuer,
        "lane": issuer.lane,
        "audience": issuer.audience,
        "tenant": issuer.tenant.slug if issuer.tenant_id is not None and issuer.tenant else None,
        "tenant_claim": issuer.tenant_claim,
        "allowed_tenants": allowed,
        "subject_claim": issuer.subject_claim,
        "kind_claim": issuer.kind_claim,
        "default_kind": issuer.default_kind,
        "algorithms": list(issuer.algorithms),
        "revocation": issuer.revocation,
        "revocation_window_seconds": issuer.revocation_window_seconds,
        "introspection_client_id": issuer.introspection_client_id,
        "introspection_client_secret": REDACTED if issuer.introspection_client_secret else "",
        "required_scopes": dict(issuer.required_scopes or {}),
        "enabled": issuer.enabled,
    }


def _current_fields(issuer: TrustedIssuer) -> dict[str, Any]:
    """The row's writable fields as the services take them (Tenant objects, not slugs)."""
    values = {name: getattr(issuer, name) for name in ISSUER_FIELDS if name not in ("tenant", "allowed_tenants")}
    values["tenant"] = issuer.tenant if issuer.tenant_id is not None else None
    values["allowed_tenants"] = list(issuer.allowed_tenants.all())
    return values


def _documents_for(fields: dict[str, Any]) -> IssuerDocuments:
    try:
        documents = issuer_documents_fetch(fields["issuer"], fields["lane"])
    except IssuerUnreachable as exc:
        logger.warning("trusted issuer refused: %s", exc)
        message = f"The issuer's metadata and keys could not be fetched: {exc}"
        raise ValidationFailed(message, details={"fields": {"issuer": [message]}}) from None
    _refused_if(metadata_errors(fields, documents.metadata))
    return documents


def _refused_if(errors: dict[str, list[str]]) -> None:
    """ValidationFailed naming each broken rule by field, if any is."""
    if errors:
        raise ValidationFailed(errors_message(errors), details={"fields": errors})


def _apply(issuer: TrustedIssuer, fields: dict[str, Any]) -> None:
    for name, value in fields.items():
        if name != "allowed_tenants":
            setattr(issuer, name, value)


def issuer_add(
    *,
    fields: dict[str, Any],
    introspection_client_secret: str = "",
    actor: str,
    documents: IssuerDocuments | None = None,
) -> TrustedIssuer:
    """Trust a new issuer. `fields`: `issuer` and any of ISSUER_FIELD_DEFAULTS (`tenant` a Tenant,
    `allowed_tenants` a list of Tenants). Fetches its metadata and JWKS (unless the caller just
    did: `documents`) and refuses when they cannot be had. Raises ValidationFailed naming each
    broken rule."""
    unknown = set(fields) - set(ISSUER_FIELDS)
    if unknown:
        raise ValidationFailed(f"Not trusted issuer fields: {', '.join(sorted(unknown))}.")
    values = {**ISSUER_FIELD_DEFAULTS, **fields}
    _refused_if(issuer_errors(values, has_secret=bool(introspection_client_secret)))
    if TrustedIssuer.objects.filter(issuer=values["issuer"]).exists():
        raise ValidationFailed(
            "This issuer is already trusted.", details={"fields": {"issuer": ["This issuer is already trusted."]}}
        )
    if documents is None:
        documents = _documents_for(values)
    else:
        _refused_if(metadata_errors(values, documents.metadata))
    # Not durable: the admin calls this inside its own change-form transaction.
    with transaction.atomic():
        issuer = TrustedIssuer()
        _apply(issuer, values)
        issuer.introspection_client_secret = _sealed(introspection_client_secret)
        issuer.metadata, issuer.jwks, issuer.fetched_at = documents.metadata, documents.jwks, timezone.now()
        issuer.save()
        issuer.allowed_tenants.set(values["allowed_tenants"])
        TrustedIssuerChange.objects.create(issuer=issuer.issuer, actor=actor, before=None, after=issuer_fields(issuer))
        invalidate_on_commit(TOPIC_APIKEY, TOPIC_CARD)
    logger.info("trusted issuer added: %s (%s)", issuer.issuer, issuer.lane)
    return issuer


def issuer_get(*, issuer: str, for_update: bool = False) -> TrustedIssuer:
    rows = TrustedIssuer.objects.filter(issuer=issuer)
    row = (rows.select_for_update() if for_update else rows.select_related("tenant")).first()
    if row is None:
        raise NotFound("No such trusted issuer.")
    return row


def issuer_update(
    *,
    issuer: str,
    changes: dict[str, Any],
    introspection_client_secret: str | None = None,
    actor: str,
    documents: IssuerDocuments | None = None,
) -> TrustedIssuer:
    """Change a trusted issuer. `introspection_client_secret`: None keeps the stored one, "" clears
    it, a value replaces it. A new issuer URL or lane re-fetches the metadata and keys."""
    unknown = set(changes) - set(ISSUER_FIELDS)
    if unknown:
        raise ValidationFailed(f"Not trusted issuer fields: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        row = issuer_get(issuer=issuer, for_update=True)
        before = issuer_fields(row)
        values = {**_current_fields(row), **changes}
        stored = row.introspection_client_secret
        has_secret = bool(stored if introspection_client_secret is None else introspection_client_secret)
        _refused_if(issuer_errors(values, has_secret=has_secret))
        if values["issuer"] != row.issuer and TrustedIssuer.objects.filter(issuer=values["issuer"]).exists():
            raise ValidationFailed(
                "This issuer is already trusted.", details={"fields": {"issuer": ["This issuer is already trusted."]}}
            )
        if values["issuer"] != row.issuer or values["lane"] != row.lane:
            documents = documents or _documents_for(values)
        metadata = documents.metadata if documents is not None else (row.metadata or {})
        _refused_if(metadata_errors(values, metadata))
        _apply(row, values)
        secret_changed = False
        if introspection_client_secret is not None:
            secret_changed = introspection_secret(row) != introspection_client_secret
            row.introspection_client_secret = _sealed(introspection_client_secret)
        if documents is not None:
            row.metadata, row.jwks, row.fetched_at = documents.metadata, documents.jwks, timezone.now()
        row.save()
        row.allowed_tenants.set(values["allowed_tenants"])
        after = issuer_fields(row)
        assert after is not None
        if secret_changed:
            after["introspection_client_secret_changed"] = True
        if after == before and documents is None:
            return row
        TrustedIssuerChange.objects.create(issuer=row.issuer, actor=actor, before=before, after=after)
        invalidate_on_commit(TOPIC_APIKEY, TOPIC_CARD)
    return row


def issuer_remove(*, issuer: str, actor: str) -> None:
    """Stop trusting an issuer: its tokens are refused on the next request in every process."""
    with transaction.atomic():
        row = issuer_get(issuer=issuer, for_update=True)
        before = issuer_fields(row)
        row.delete()
        TrustedIssuerChange.objects.create(issuer=issuer, actor=actor, before=before, after={"removed": True})
        invalidate_on_commit(TOPIC_APIKEY, TOPIC_CARD)
    logger.info("trusted issuer removed: %s", issuer)


def issuer_documents_store(*, issuer_id: int, documents: IssuerDocuments, fetched_at: dt.datetime) -> None:
    """Store re-fetched metadata and keys (a refresh: the issuer's own published data, not an
    operator's change, so not audited). The trigger tells every process to drop its copy."""
    with transaction.atomic():
        TrustedIssuer.objects.filter(pk=issuer_id).update(
            metadata=documents.metadata, jwks=documents.jwks, fetched_at=fetched_at
        )
        invalidate_on_commit(TOPIC_APIKEY, TOPIC_CARD)


def issuer_refresh(*, issuer: str) -> TrustedIssuer:
    """Fetch the issuer's metadata and keys now and store them (admin action, command)."""
    row = issuer_get(issuer=issuer)
    try:
        documents = issuer_documents_fetch(row.issuer, row.lane)
    except IssuerUnreachable as exc:
        raise ValidationFailed(f"The issuer's metadata and keys could not be fetched: {exc}") from None
    issuer_documents_store(issuer_id=row.pk, documents=documents, fetched_at=timezone.now())
    row.refresh_from_db()
    return row


def tenants_by_slug(slugs: list[str]) -> list[Tenant]:
    """The tenants named by `slugs` (command line input), or ValidationFailed naming the unknown."""
    found = {t.slug: t for t in Tenant.objects.filter(slug__in=slugs)}
    missing = [s for s in slugs if s not in found]
    if missing:
        raise ValidationFailed(f"No such tenant: {', '.join(missing)}.")
    return [found[s] for s in slugs]
