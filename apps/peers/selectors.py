"""Reads of peer credentials. One not-found path: an unknown id and another tenant's id are the
same NotFound (STYLE.md habit 5)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from apps.core.errors import NotFound
from apps.core.sealing import unseal
from apps.peers.models import PeerBinding, PeerCredential
from apps.tenants.models import Tenant

# apps.core.sealing: peer credentials have their own purpose, so no other sealed value opens as one.
PEER_CREDENTIALS = b"openwop.peers.credentials.v1"
NO_SUCH_CREDENTIAL = "No such peer credential."


def peer_origin_of(url: str) -> str:
    """`https://host[:port]` of a URL the egress grammar accepted (default port elided)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    return f"{parts.scheme.lower()}://{host}" + (f":{port}" if port not in (None, 443) else "")


def _tenant_pk(tenant_slug: str) -> int:
    pk = Tenant.objects.filter(slug=tenant_slug).values_list("pk", flat=True).first()
    if pk is None:
        raise NotFound(NO_SUCH_CREDENTIAL)
    return int(pk)


def peer_credential_get(*, tenant_slug: str, credential_id: str, for_update: bool = False) -> PeerCredential:
    rows = PeerCredential.objects.for_tenant(_tenant_pk(tenant_slug)).filter(credential_id=credential_id)
    credential = (rows.select_for_update() if for_update else rows).first()
    if credential is None:
        raise NotFound(NO_SUCH_CREDENTIAL)
    return credential


def peer_credential_list(*, tenant_slug: str) -> list[PeerCredential]:
    return list(PeerCredential.objects.for_tenant(_tenant_pk(tenant_slug)))


def peer_credential_doc(credential: PeerCredential) -> dict[str, Any]:
    """What the API shows: never the secret, sealed or not."""
    return {
        "credentialId": credential.credential_id,
        "origin": credential.origin,
        "scheme": credential.scheme,
        "label": credential.label,
        "cardSignaturePolicy": credential.card_signature_policy,
        # Public material (checked to be a public key when set), so it may be shown.
        "pinnedCardKey": credential.pinned_card_key,
        "createdAt": credential.created_at.isoformat().replace("+00:00", "Z"),
    }


def peer_authorization(credential: PeerCredential) -> str:
    """The `Authorization` value to present: opened only at the moment of sending."""
    return f"{credential.scheme} {unseal(credential.secret_sealed, purpose=PEER_CREDENTIALS)}"


NO_SUCH_BINDING = "No such peer binding."


def peer_binding_get(*, tenant_pk: int, protocol: str, binding_id: str) -> PeerBinding:
    """The tenant's binding of that name for that protocol; NotFound otherwise (another tenant's
    binding of the same name is simply not there)."""
    binding = (
        PeerBinding.objects.for_tenant(tenant_pk)
        .select_related("credential")
        .filter(protocol=protocol, binding_id=binding_id)
        .first()
    )
    if binding is None:
        raise NotFound(NO_SUCH_BINDING, details={"bindingId": binding_id})
    return binding
