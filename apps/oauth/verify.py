"""An access token of a trusted issuer -> the caller's Subject (identity.md §2 and §6, fail closed).

The one binding pipeline of the OAuth 2.1 / OIDC lanes; every door reaches it through
apps/tenants/selectors.py. In order:

1. The unverified `iss` only picks the trusted issuer (an unknown or disabled one: identity_unverified).
2. The signature: an algorithm the issuer is configured for (never none/HS*), the issuer's key named
   by `kid` (an unknown kid re-fetches the JWKS, at most once per OPENWOP_OAUTH_KEY_REFRESH_MIN_SECONDS
   per issuer and process, so a flood of bad kids cannot hammer the issuer).
3. The claims: `iss` exact, `aud` containing the issuer's audience or the door's (audience_mismatch),
   `exp` required, `nbf` and `iat` not in the future, within OPENWOP_OAUTH_LEEWAY_SECONDS
   (identity_unverified, saying which).
4. Revocation (§6): `exp-only` refuses a token whose total or remaining lifetime exceeds the window, or
   that has no `iat` (credential_lifetime_exceeded). `exp-and-recheck` asks the issuer's RFC 7662
   endpoint, and trusts an answer for at most the window: a revoked token is refused within it
   (credential_revoked); an introspection that fails refuses the token (never accepted unchecked).
5. The Subject: the tenant (fixed, or the tenant claim naming one of the allowed tenants: else
   identity_unresolvable), subject id, kind, lane, scopes.

Caches (per process, correct first): the issuer's configuration under TOPIC_APIKEY (any write to
the issuer, its allowed tenants or a tenant drops it in every process: migration 0002), the
introspection answer per token digest for at most the window, and the verified Subject per
(token digest, door) until min(exp, the introspection answer's expiry), dropped with TOPIC_APIKEY.
No cache holds a token: only its SHA-256. Logs name the issuer, the kid and the reason, never a token.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.fernet import InvalidToken
from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.core.errors import (
    AudienceMismatch,
    CredentialLifetimeExceeded,
    CredentialRevoked,
    IdentityUnresolvable,
    IdentityUnverified,
)
from apps.core.invalidation import (
    TOPIC_APIKEY,
    TOPIC_FACET,
    cache_generation,
    cache_listening,
    cached,
    secret_cache_key,
)
from apps.core.sealing import unseal
from apps.oauth.documents import IntrospectionFailed, IssuerUnreachable, issuer_documents_fetch, token_introspect
from apps.oauth.models import RevocationMode
from apps.oauth.selectors import door_audience, door_audiences, trusted_issuer_by_iss
from apps.oauth.services import OAUTH_INTROSPECTION_SECRET, issuer_documents_store
from apps.oauth.validation import introspection_without_client
from apps.tenants.subject import Subject

logger = logging.getLogger(__name__)

MAX_CACHED = 10_000  # per cache: an unbounded key space (tokens) must not grow without end


# ---------------------------------------------------------------------------------------------
# The issuer as verification needs it (immutable, cached per process)


@dataclass(frozen=True)
class IssuerConfig:
    pk: int
    issuer: str
    lane: str
    audience: str
    tenant_slug: str | None
    tenant_pk: int | None
    tenant_claim: str
    allowed_tenants: Mapping[str, int]  # slug -> pk
    subject_claim: str
    kind_claim: str
    default_kind: str
    algorithms: frozenset[str]
    revocation: str
    window: int
    introspection_endpoint: str
    introspection_client_id: str
    introspection_secret_sealed: str = field(repr=False)
    introspection_without_client: bool  # the metadata allows it (validation.introspection_without_client)
    jwks: Mapping[str, Any] = field(repr=False)
    fetched_at: dt.datetime | None = None

    def key_for(self, kid: str | None, alg: str) -> jwt.PyJWK | None:
        """The published key `kid` names, usable with `alg`; without a kid, the only key there is."""
        keys = [k for k in self.jwks.get("keys", []) if isinstance(k, dict)]
        candidates = [k for k in keys if k.get("kid") == kid] if kid is not None else keys[:1] if len(keys) == 1 else []
        for jwk in candidates:
            if jwk.get("use", "sig") != "sig" or jwk.get("alg", alg) != alg:
                continue
            try:
                return jwt.PyJWK(jwk, algorithm=alg)
            except jwt.PyJWTError:
                continue
        return None


def _config_load(iss: str) -> IssuerConfig:
    row = trusted_issuer_by_iss(iss)
    if row is None:
        raise IdentityUnverified("The access token's issuer is not trusted by this host.")
    metadata = row.metadata or {}
    endpoint = metadata.get("introspection_endpoint")
    return IssuerConfig(
        pk=row.pk,
        issuer=row.issuer,
        lane=row.lane,
        audience=row.audience,
        tenant_slug=row.tenant.slug if row.tenant_id is not None and row.tenant else None,
        tenant_pk=row.tenant_id,
        tenant_claim=row.tenant_claim,
        allowed_tenants={t.slug: t.pk for t in row.allowed_tenants.all()},
        subject_claim=row.subject_claim,
        kind_claim=row.kind_claim,
        default_kind=row.default_kind,
        algorithms=frozenset(a for a in row.algorithms if isinstance(a, str)),
        revocation=row.revocation,
        window=int(row.revocation_window_seconds),
        introspection_endpoint=endpoint if isinstance(endpoint, str) else "",
        introspection_client_id=row.introspection_client_id,
        introspection_secret_sealed=row.introspection_client_secret,
        introspection_without_client=introspection_without_client(metadata),
        jwks=row.jwks or {"keys": []},
        fetched_at=row.fetched_at,
    )


def issuer_config(iss: str) -> IssuerConfig:
    """The enabled issuer `iss` names exactly, from this process's cache; identity_unverified if none.
    Only a found issuer is cached (an unknown one is read again: never a stale refusal)."""
    return cached(TOPIC_APIKEY, ("oauth-issuer", iss), lambda: _config_load(iss))


# ---------------------------------------------------------------------------------------------
# Refreshing an issuer's published keys (rate limited per issuer and process)

_refresh_lock = threading.Lock()
_last_refresh: dict[str, float] = {}


def _refresh_allowed(iss: str) -> bool:
    """True at most once per OPENWOP_OAUTH_KEY_REFRESH_MIN_SECONDS for `iss` in this process."""
    interval = float(settings.OPENWOP_OAUTH_KEY_REFRESH_MIN_SECONDS)
    now = time.monotonic()
    with _refresh_lock:
        last = _last_refresh.get(iss)
        if last is not None and now - last < interval:
            return False
        _last_refresh[iss] = now
        return True


def _documents_refresh(config: IssuerConfig, reason: str) -> IssuerConfig | None:
    """Re-fetch the issuer's metadata and keys (when the rate limit allows) and store them; the
    reloaded configuration, or None when nothing was (or could be) fetched."""
    if not _refresh_allowed(config.issuer):
        return None
    try:
        documents = issuer_documents_fetch(config.issuer, config.lane)
    except IssuerUnreachable as exc:
        logger.warning("oauth issuer %s: refresh (%s) failed: %s", config.issuer, reason, exc)
        return None
    issuer_documents_store(issuer_id=config.pk, documents=documents, fetched_at=timezone.now())
    logger.info("oauth issuer %s: metadata and keys refreshed (%s)", config.issuer, reason)
    return _config_load(config.issuer)  # this process's cache drops it on commit; read it fresh


def _is_stale(config: IssuerConfig) -> bool:
    if config.fetched_at is None:
        return True
    age = (timezone.now() - config.fetched_at).total_seconds()
    return age > float(settings.OPENWOP_OAUTH_METADATA_MAX_AGE_SECONDS)


# ---------------------------------------------------------------------------------------------
# RFC 7662 introspection, cached per token digest for at most the window

_introspection_lock = threading.Lock()
_introspections: dict[str, tuple[bool, float]] = {}  # digest -> (active, until epoch seconds)


def _bounded_store(store: dict[Any, Any], key: Any, value: Any) -> None:
    if key not in store and len(store) >= MAX_CACHED:
        del store[next(iter(store))]  # the oldest stored
    store[key] = value


def _introspected_active(config: IssuerConfig, token: str, digest: str, exp: int) -> tuple[bool, float]:
    """(active, until): the issuer's RFC 7662 answer, reused until `until` (<= now + window)."""
    now = time.time()
    with _introspection_lock:
        hit = _introspections.get(digest)
    if hit is not None and hit[1] > now:
        return hit
    if not config.introspection_endpoint or not (config.introspection_client_id or config.introspection_without_client):
        logger.warning("oauth issuer %s: no introspection endpoint or client; token refused", config.issuer)
        raise IdentityUnverified("The access token cannot be re-checked with its issuer (no introspection configured).")
    secret = ""
    if config.introspection_secret_sealed:
        try:
            secret = unseal(config.introspection_secret_sealed.encode("ascii"), purpose=OAUTH_INTROSPECTION_SECRET)
        except (InvalidToken, UnicodeError):
            # Sealed under another SECRET_KEY (rotated, or another deployment's row): unusable.
            logger.error("oauth issuer %s: the introspection secret cannot be unsealed; re-enter it", config.issuer)
            raise IdentityUnverified(
                "The access token cannot be re-checked with its issuer (host configuration)."
            ) from None
    try:
        answer = token_introspect(
            endpoint=config.introspection_endpoint, token=token,
            client_id=config.introspection_client_id, client_secret=secret,
        )  # fmt: skip
    except IntrospectionFailed as exc:
        logger.warning("oauth issuer %s: introspection failed (%s); token refused", config.issuer, exc)
        raise IdentityUnverified(
            "The access token could not be re-checked with its issuer just now; retry shortly."
        ) from None
    active = answer["active"] is True
    until = min(now + config.window, float(exp))
    with _introspection_lock:
        _bounded_store(_introspections, digest, (active, until))
    return active, until


# ---------------------------------------------------------------------------------------------
# The pipeline


def _unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise IdentityUnverified("The bearer credential is neither an API key nor a well-formed JWT.") from None
    if not isinstance(claims, dict):
        raise IdentityUnverified("The access token's claims are not a JSON object.")
    return header, claims


def _audiences(config: IssuerConfig, door: str | None) -> list[str]:
    if config.audience:
        return [config.audience]
    if door is not None:
        return [door_audience(door)]
    return sorted(door_audiences())


def _decoded(config: IssuerConfig, token: str, key: jwt.PyJWK, alg: str, door: str | None) -> dict[str, Any]:
    audiences = _audiences(config, door)
    try:
        return jwt.decode(
            token,
            key.key,
            algorithms=[alg],
            issuer=config.issuer,
            audience=audiences,
            leeway=float(settings.OPENWOP_OAUTH_LEEWAY_SECONDS),
            options={"require": ["exp", "iss"], "verify_signature": True},
        )
    except jwt.InvalidSignatureError:
        raise IdentityUnverified("The access token's signature does not verify.") from None
    except jwt.ExpiredSignatureError:
        raise IdentityUnverified("The access token has expired (exp).") from None
    except jwt.ImmatureSignatureError as exc:
        what = "issued in the future (iat)" if "iat" in str(exc) else "not yet valid (nbf)"
        raise IdentityUnverified(f"The access token is {what}.") from None
    except jwt.MissingRequiredClaimError as exc:
        if exc.claim == "aud":
            raise AudienceMismatch(
                f"The access token has no audience; it must be addressed to {audiences[0]}."
            ) from None
        raise IdentityUnverified(f"The access token has no `{exc.claim}` claim.") from None
    except jwt.InvalidAudienceError:
        raise AudienceMismatch(f"The access token is not addressed to this door ({', '.join(audiences)}).") from None
    except jwt.InvalidIssuerError:
        raise IdentityUnverified("The access token's issuer does not match.") from None
    except jwt.PyJWTError as exc:
        raise IdentityUnverified(f"The access token is not valid ({type(exc).__name__}).") from None


def _lifetime_bounded(config: IssuerConfig, claims: dict[str, Any]) -> None:
    """identity.md §2.2 exp-only: both bounds, and no `iat` is a refusal too."""
    window = config.window
    iat, exp = claims.get("iat"), int(claims["exp"])
    if not isinstance(iat, int | float) or isinstance(iat, bool):
        raise CredentialLifetimeExceeded("The access token has no `iat`: its lifetime cannot be bounded (exp-only).")
    if exp - int(iat) > window:
        raise CredentialLifetimeExceeded(
            f"The access token's lifetime (exp - iat = {exp - int(iat)} s) exceeds this lane's {window} s bound."
        )
    if exp - time.time() > window:
        raise CredentialLifetimeExceeded(f"The access token's remaining lifetime exceeds this lane's {window} s bound.")


def _claim_text(claims: dict[str, Any], name: str) -> str | None:
    value = claims.get(name)
    return value if isinstance(value, str) and value else None


def _scopes(claims: dict[str, Any]) -> frozenset[str]:
    """`scope` (RFC 9068: space-separated), else `scp` (a list, or space-separated too)."""
    scopes = claims.get("scope")
    if not isinstance(scopes, str):
        scopes = claims.get("scp")
    if isinstance(scopes, str):
        return frozenset(scopes.split())
    return frozenset(s for s in scopes if isinstance(s, str) and s) if isinstance(scopes, list) else frozenset()


def _subject(config: IssuerConfig, claims: dict[str, Any]) -> Subject:
    if config.tenant_claim:
        slug = _claim_text(claims, config.tenant_claim)
        if slug is None or slug not in config.allowed_tenants:
            raise IdentityUnresolvable(
                f"The access token's `{config.tenant_claim}` does not name a tenant its issuer may act in."
            )
        tenant_slug, tenant_pk = slug, config.allowed_tenants[slug]
    else:
        if config.tenant_slug is None or config.tenant_pk is None:
            raise IdentityUnresolvable("The issuer's tenant no longer exists.")
        tenant_slug, tenant_pk = config.tenant_slug, config.tenant_pk
    subject_id = _claim_text(claims, config.subject_claim)
    if subject_id is None:
        raise IdentityUnresolvable(f"The access token has no `{config.subject_claim}` to identify its subject.")
    kind = config.default_kind
    if config.kind_claim:
        kind = claims.get(config.kind_claim)  # type: ignore[assignment]
        if kind not in ("user", "agent"):
            raise IdentityUnresolvable(f"The access token's `{config.kind_claim}` is neither user nor agent.")
    return Subject(
        issuer=config.issuer,
        subject_id=subject_id,
        tenant=tenant_slug,
        kind=kind,  # type: ignore[arg-type]
        lane=config.lane,
        tenant_pk=tenant_pk,
        scopes=_scopes(claims),
    )


def _verify(token: str, door: str | None, digest: str) -> tuple[Subject, float]:
    """(Subject, until): the verified Subject and how long it may be reused (epoch seconds)."""
    header, unverified = _unverified(token)
    iss = unverified.get("iss")
    if not isinstance(iss, str) or not iss:
        raise IdentityUnverified("The access token has no `iss` claim.")
    config = issuer_config(iss)
    if _is_stale(config):
        # Older than the max age: not used until re-fetched (a failed or rate-limited refresh
        # refuses the token rather than trust keys the issuer may have withdrawn).
        refreshed = _documents_refresh(config, "max age")
        if refreshed is None:
            raise IdentityUnverified("The issuer's keys could not be refreshed just now; retry shortly.")
        config = refreshed
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in config.algorithms:
        logger.info("oauth issuer %s: token refused: algorithm %r not accepted", config.issuer, alg)
        raise IdentityUnverified("The access token's signature algorithm is not accepted for its issuer.")
    kid = header.get("kid") if isinstance(header.get("kid"), str) else None
    key = config.key_for(kid, alg)
    if key is None:
        refreshed = _documents_refresh(config, "unknown kid")
        if refreshed is not None:
            config = refreshed
            key = config.key_for(kid, alg)
    if key is None:
        logger.info("oauth issuer %s: token refused: kid %r is not published", config.issuer, kid)
        raise IdentityUnverified("The access token is signed with a key its issuer does not publish.")
    claims = _decoded(config, token, key, alg, door)
    exp = int(claims["exp"])
    until = float(exp)
    if config.revocation == RevocationMode.EXP_ONLY:
        _lifetime_bounded(config, claims)
    subject = _subject(config, claims)
    if config.revocation == RevocationMode.EXP_AND_RECHECK:
        active, introspected_until = _introspected_active(config, token, digest, exp)
        if not active:
            logger.info("oauth issuer %s: token refused: introspection says inactive", config.issuer)
            raise CredentialRevoked("The access token has been revoked (its issuer says it is not active).")
        until = min(until, introspected_until)
    return subject, until


# ---------------------------------------------------------------------------------------------
# The verified-Subject cache (expiring; emptied with TOPIC_APIKEY / TOPIC_FACET in every process)

_verified_lock = threading.Lock()
_verified: dict[tuple[str, str | None], tuple[Subject, float, tuple[int, int]]] = {}


def _cacheable_here() -> bool:
    """As apps/core/invalidation.py: listening, and not inside an atomic block."""
    if not cache_listening():
        return False
    return asyncio._get_running_loop() is not None or not connection.in_atomic_block


def _generations() -> tuple[int, int]:
    return cache_generation(TOPIC_APIKEY), cache_generation(TOPIC_FACET)


def verified_subject_cached(token: str, door: str | None) -> Subject | None:
    """The Subject verified for this token at this door, while still valid; no I/O (event-loop safe)."""
    if not _cacheable_here():
        return None
    key = (secret_cache_key(token), door)
    with _verified_lock:
        hit = _verified.get(key)
    if hit is None:
        return None
    subject, until, generations = hit
    if until <= time.time() or generations != _generations():
        with _verified_lock:
            _verified.pop(key, None)
        return None
    return subject


def subject_from_jwt(token: str, *, door: str | None = None) -> Subject:
    """Verify an access token of a trusted issuer at `door` ("mcp", "a2a", "rest"; None: any door's
    audience) and return its Subject, or raise the identity.md §2 refusal (all 401)."""
    hit = verified_subject_cached(token, door)
    if hit is not None:
        return hit
    digest = secret_cache_key(token)
    storable = _cacheable_here()
    generations = _generations()  # before the load: a change landing meanwhile refuses the store
    subject, until = _verify(token, door, digest)
    if storable and cache_listening() and generations == _generations():
        with _verified_lock:
            _bounded_store(_verified, (digest, door), (subject, until, generations))
    return subject


def oauth_caches_clear() -> None:
    """Forget every verified token, introspection answer and refresh timestamp (tests)."""
    with _verified_lock:
        _verified.clear()
    with _introspection_lock:
        _introspections.clear()
    with _refresh_lock:
        _last_refresh.clear()
