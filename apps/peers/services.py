"""Writes for peer credentials: register (sealed; the secret is never returned), replace the secret
(rotation), set what the peer's agent card must prove (`cardSignaturePolicy`, a pinned public
key), delete."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from django.db import transaction

from apps.core.egress import egress_check_url
from apps.core.errors import ValidationFailed
from apps.core.ids import mint_opaque
from apps.core.sealing import seal
from apps.peers.card_signatures import pinned_card_key_parse
from apps.peers.models import CardSignaturePolicy, PeerBinding, PeerBindingProtocol, PeerCredential
from apps.peers.selectors import PEER_CREDENTIALS, peer_credential_get, peer_origin_of
from apps.tenants.models import Tenant
from apps.tenants.subject import Subject

MAX_SECRET_LENGTH = 4096
_BINDING_ID_RE = re.compile(r"^[A-Za-z0-9._~:-]{1,128}$")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]{0,31}$")  # an RFC 9110 token


# A sentinel for "not given" in updates: None is a value there (it clears the pinned key).
UNCHANGED: Any = object()


def _card_signature_policy(value: object) -> str:
    if value not in CardSignaturePolicy.values:
        raise ValidationFailed(
            f"cardSignaturePolicy must be one of {', '.join(CardSignaturePolicy.values)}.",
            details={"field": "cardSignaturePolicy"},
        )
    return str(value)


def _secret_check(secret: object) -> str:
    if not isinstance(secret, str) or not secret or len(secret) > MAX_SECRET_LENGTH or "\n" in secret:
        raise ValidationFailed("secret must be a non-empty single-line string.", details={"field": "secret"})
    return secret


def _pinned_card_key(value: object) -> dict[str, Any] | None:
    return None if value is None else pinned_card_key_parse(value)


def peer_credential_create(
    *,
    subject: Subject,
    url: str,
    secret: str,
    scheme: str = "Bearer",
    label: str = "",
    card_signature_policy: str = CardSignaturePolicy.VERIFY_IF_PRESENT,
    pinned_card_key: object = None,
) -> PeerCredential:
    """Register a credential for the origin of `url` (checked by the egress guard's grammar now;
    every use re-checks the destination at connect time)."""
    egress_check_url(url, resolve=False)
    _secret_check(secret)
    if not isinstance(scheme, str) or not _SCHEME_RE.match(scheme):
        raise ValidationFailed("scheme must be an HTTP auth scheme token, e.g. Bearer.", details={"field": "scheme"})
    policy = _card_signature_policy(card_signature_policy)
    pinned = _pinned_card_key(pinned_card_key)
    with transaction.atomic(durable=True):
        return PeerCredential.objects.create(
            tenant=Tenant.objects.get(slug=subject.tenant),
            credential_id=mint_opaque(),
            origin=peer_origin_of(url),
            scheme=scheme,
            secret_sealed=seal(secret, purpose=PEER_CREDENTIALS),
            label=label[:200],
            card_signature_policy=policy,
            pinned_card_key=pinned,
        )


def peer_credential_update(
    *,
    subject: Subject,
    credential_id: str,
    card_signature_policy: object = UNCHANGED,
    pinned_card_key: object = UNCHANGED,
    secret: object = UNCHANGED,
) -> PeerCredential:
    """Change what the peer's agent card must prove (`pinned_card_key=None` removes the pin), or
    replace the secret: sealed under the current key, presented from the next call on (a run in
    flight reads it when it calls), so a peer that accepts both during the change sees no gap."""
    fields: dict[str, Any] = {}
    if secret is not UNCHANGED:
        fields["secret_sealed"] = seal(_secret_check(secret), purpose=PEER_CREDENTIALS)
    if card_signature_policy is not UNCHANGED:
        fields["card_signature_policy"] = _card_signature_policy(card_signature_policy)
    if pinned_card_key is not UNCHANGED:
        fields["pinned_card_key"] = _pinned_card_key(pinned_card_key)
    with transaction.atomic(durable=True):
        credential = peer_credential_get(tenant_slug=subject.tenant, credential_id=credential_id, for_update=True)
        for name, value in fields.items():
            setattr(credential, name, value)
        if fields:
            credential.save(update_fields=list(fields))
        return credential


def peer_credential_set_card_signature_policy(*, credential_pk: int, policy: str) -> PeerCredential:
    """The admin's door (STYLE.md habit 15): an operator sets the policy of one credential."""
    checked = _card_signature_policy(policy)
    with transaction.atomic(durable=True):
        credential = PeerCredential.unscoped_all_tenants.select_for_update().get(pk=credential_pk)
        credential.card_signature_policy = checked
        credential.save(update_fields=["card_signature_policy"])
        return credential


def peer_credential_delete(*, subject: Subject, credential_id: str) -> None:
    with transaction.atomic(durable=True):
        peer_credential_get(tenant_slug=subject.tenant, credential_id=credential_id).delete()


def peer_binding_set(
    *, tenant: Tenant, protocol: str, binding_id: str, url: str, credential_id: str | None = None
) -> PeerBinding:
    """Create or repoint the tenant's binding `binding_id` (idempotent: the same URL changes
    nothing). The URL must be http(s); the egress guard judges its addresses at every call, as for
    any peer, so a binding never widens what the host may reach. Not durable: a caller may set
    several bindings in one transaction."""
    if protocol not in PeerBindingProtocol.values:
        raise ValidationFailed("protocol must be a2a or mcp.", details={"field": "protocol"})
    if not _BINDING_ID_RE.match(binding_id):
        raise ValidationFailed("A binding id is 1-128 of [A-Za-z0-9._~:-].", details={"field": "bindingId"})
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise ValidationFailed("A peer binding's URL is an http(s) URL.", details={"field": "url"})
    with transaction.atomic():
        credential = None
        if credential_id is not None:
            credential = peer_credential_get(tenant_slug=tenant.slug, credential_id=credential_id)
        binding, created = PeerBinding.objects.for_tenant(tenant).get_or_create(
            protocol=protocol, binding_id=binding_id, defaults={"tenant": tenant, "url": url, "credential": credential}
        )
        if not created and (binding.url, binding.credential_id) != (url, getattr(credential, "pk", None)):
            binding.url, binding.credential = url, credential
            binding.save(update_fields=["url", "credential", "updated_at"])
    return binding


def peer_binding_delete(*, tenant: Tenant, protocol: str, binding_id: str) -> bool:
    """Remove the binding; False when there was none."""
    deleted, _ = PeerBinding.objects.for_tenant(tenant).filter(protocol=protocol, binding_id=binding_id).delete()
    return deleted > 0
