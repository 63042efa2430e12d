"""Reads for identity: a bearer credential -> the caller's Subject (identity.md §2, fail closed).

A bearer is an API key of this host (`owk_...`, the api-key lane) or an access token of a trusted
OAuth 2.1 / OIDC issuer (a JWT: apps/oauth/verify.py, the oidc / oauth2 lanes). The `door` keyword
("mcp", "a2a", "rest") names the audience a token must carry; None accepts any door's audience.
API keys ignore it, and take no extra step: the prefix check is their whole detour.
"""

from __future__ import annotations

import hmac
import re

from asgiref.sync import sync_to_async
from django.conf import settings

from apps.core.errors import CredentialRevoked, Unauthenticated
from apps.core.invalidation import TOPIC_APIKEY, acached, cached, secret_cache_key
from apps.core.metrics import caller_tenant_seen
from apps.core.rate_limits import BucketTenant, bucket_tenant_learn, bucket_tenant_to_learn, caller_key
from apps.oauth.verify import subject_from_jwt, verified_subject_cached
from apps.tenants.budgets import tenant_budget_overrides
from apps.tenants.models import ApiKey, Tenant
from apps.tenants.services import KEY_SCHEME, secret_digest
from apps.tenants.subject import Subject


def api_key_issuer() -> str:
    return f"{settings.OPENWOP_PUBLIC_URL}/api-keys"


def _parse_raw_key(raw: str) -> tuple[str, str]:
    scheme, sep, rest = raw.partition("_")
    prefix, dot, secret = rest.partition(".")
    if scheme != KEY_SCHEME or not sep or not dot or not prefix or not secret:
        raise Unauthenticated("The bearer credential is not a valid API key.")
    return prefix, secret


_KEY_PREFIX = f"{KEY_SCHEME}_"
# A JWS in compact serialisation: three base64url segments (an empty signature, alg none, is left
# to the verifier, which refuses it and says why).
_JWT_RE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


def _is_access_token(raw: str) -> bool:
    """Not an API key and shaped like a JWT: the OAuth lanes' verifier takes it."""
    return not raw.startswith(_KEY_PREFIX) and _JWT_RE.fullmatch(raw) is not None


def subject_from_api_key(raw: str, *, door: str | None = None) -> Subject:
    """Resolve a raw bearer credential to its Subject, or raise 401: an API key (unauthenticated /
    credential_revoked), or an access token of a trusted issuer (apps/oauth/verify.py codes)."""
    if _is_access_token(raw):
        return caller_tenant_seen(subject_from_jwt(raw, door=door))
    return _subject_from_key(raw)


def _subject_from_key(raw: str) -> Subject:
    prefix, secret = _parse_raw_key(raw)
    api_key = ApiKey.unscoped_all_tenants.select_related("tenant").filter(prefix=prefix).first()
    if api_key is None or not hmac.compare_digest(api_key.secret_digest, secret_digest(secret)):
        raise Unauthenticated("The bearer credential is not a valid API key.")
    if api_key.revoked_at is not None:
        raise CredentialRevoked()
    return caller_tenant_seen(
        Subject(
            issuer=api_key_issuer(),
            subject_id=api_key.subject_id,
            tenant=api_key.tenant.slug,
            kind=api_key.kind,  # type: ignore[arg-type]
            tenant_pk=api_key.tenant_id,
        )
    )


def subject_tenant_pk(subject: Subject) -> int:
    """The pk of the Subject's tenant: carried from its credential's read when it has it, else one
    lookup by slug (a Subject built elsewhere). The one way tenant-scoped reads get it."""
    if subject.tenant_pk is not None:
        return subject.tenant_pk
    return int(Tenant.objects.values_list("pk", flat=True).get(slug=subject.tenant))


async def asubject_tenant_pk(subject: Subject) -> int:
    """`subject_tenant_pk` on the event loop: a thread step only for a Subject built without it."""
    if subject.tenant_pk is not None:
        return subject.tenant_pk
    return await sync_to_async(subject_tenant_pk)(subject)


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header, or 401 unauthenticated."""
    if not authorization:
        raise Unauthenticated("Authorization: Bearer <api key or access token> is required.")
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise Unauthenticated("The Authorization header must be 'Bearer <api key or access token>'.")
    return token


def subject_from_authorization(authorization: str | None, *, door: str | None = None) -> Subject:
    """The helper async and JSON-RPC views use: the same rules as the DRF authentication class."""
    return _tenant_learned(authorization, subject_from_api_key(bearer_token(authorization), door=door))


# --- the bucket -> tenant table the request limits read before authentication ---------------------
# (apps.core.rate_limits `bucket_tenant`): once a credential authenticated here, its bucket's tenant
# and that tenant's budget row are remembered, so its next requests meet the tenant's budgets
# before any query. Learned again once older than TENANT_LEARNED_SECONDS (a budget edit), dropped
# by the `apikey` invalidation (a revoked key, an edited tenant).


def _bucket_tenant_read(subject: Subject, tenant_pk: int) -> BucketTenant:
    """The tenant's request-path budgets, from the budgets' one cached row (apps.tenants.budgets)."""
    own = tenant_budget_overrides(tenant_pk)
    return BucketTenant(
        pk=tenant_pk, slug=subject.tenant, requests_per_minute=own["requests_per_minute"], streams=own["streams"]
    )


def _to_learn(authorization: str | None, subject: Subject) -> tuple[str, int, int] | None:
    """(bucket, tenant pk, generation) when the bucket's tenant is to be (re)learned, else None."""
    if subject.tenant_pk is None:
        return None
    bucket = caller_key(authorization)
    generation = None if bucket is None else bucket_tenant_to_learn(bucket)
    if bucket is None or generation is None:
        return None
    return bucket, subject.tenant_pk, generation


def _tenant_learned(authorization: str | None, subject: Subject) -> Subject:
    """`subject`, its bucket's tenant learned on the way (a dict read while it is known)."""
    learn = _to_learn(authorization, subject)
    if learn is not None:
        bucket, tenant_pk, generation = learn
        bucket_tenant_learn(bucket, _bucket_tenant_read(subject, tenant_pk), generation)
    return subject


async def _atenant_learned(authorization: str | None, subject: Subject) -> Subject:
    learn = _to_learn(authorization, subject)
    if learn is not None:
        bucket, tenant_pk, generation = learn
        tenant = await sync_to_async(_bucket_tenant_read)(subject, tenant_pk)
        bucket_tenant_learn(bucket, tenant, generation)
    return subject


def _api_key_cache_key(raw: str) -> tuple[str, str]:
    return secret_cache_key(raw), api_key_issuer()


def subject_from_authorization_cached(authorization: str | None, *, door: str | None = None) -> Subject:
    """`subject_from_authorization` for the protocol doors' hot path: the same rules and errors,
    the key's resolution through this process's cache (apps/core/invalidation.py).

    Only a resolved Subject is stored, under the SHA-256 of the key (never the key itself): an
    unknown or revoked key raises exactly as uncached, on every request. A write to the key or
    its tenant (a revocation) empties the cache in every process (the tables' triggers). An access
    token goes to its verifier, which keeps its own expiring cache (apps/oauth/verify.py)."""
    raw = bearer_token(authorization)
    if _is_access_token(raw):
        return _tenant_learned(authorization, subject_from_api_key(raw, door=door))
    subject = cached(TOPIC_APIKEY, _api_key_cache_key(raw), lambda: _subject_from_key(raw))
    return _tenant_learned(authorization, caller_tenant_seen(subject))


async def asubject_from_authorization_cached(authorization: str | None, *, door: str | None = None) -> Subject:
    """`subject_from_authorization_cached` from the event loop: a hit awaits nothing; only a miss
    reads the key (or verifies the token), on a thread (the refusals, never cached, take that path
    every time)."""
    raw = bearer_token(authorization)
    if _is_access_token(raw):
        hit = verified_subject_cached(raw, door)
        if hit is None:
            hit = await sync_to_async(subject_from_jwt)(raw, door=door)
        return await _atenant_learned(authorization, caller_tenant_seen(hit))
    subject = await acached(TOPIC_APIKEY, _api_key_cache_key(raw), lambda: sync_to_async(_subject_from_key)(raw))
    return await _atenant_learned(authorization, caller_tenant_seen(subject))
