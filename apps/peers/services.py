"""Writes for peer credentials: register (sealed; the secret is never returned), delete."""

from __future__ import annotations

import re

from django.db import transaction

from apps.core.egress import egress_check_url
from apps.core.errors import ValidationFailed
from apps.core.ids import mint_opaque
from apps.core.sealing import seal
from apps.peers.models import PeerCredential
from apps.peers.selectors import PEER_CREDENTIALS, peer_credential_get, peer_origin_of
from apps.tenants.models import Tenant
from apps.tenants.subject import Subject

MAX_SECRET_LENGTH = 4096
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]{0,31}$")  # an RFC 9110 token


def peer_credential_create(
    *, subject: Subject, url: str, secret: str, scheme: str = "Bearer", label: str = ""
) -> PeerCredential:
    """Register a credential for the origin of `url` (checked by the egress guard's grammar now;
    every use re-checks the destination at connect time)."""
    egress_check_url(url, resolve=False)
    if not isinstance(secret, str) or not secret or len(secret) > MAX_SECRET_LENGTH or "\n" in secret:
        raise ValidationFailed("secret must be a non-empty single-line string.", details={"field": "secret"})
    if not isinstance(scheme, str) or not _SCHEME_RE.match(scheme):
        raise ValidationFailed("scheme must be an HTTP auth scheme token, e.g. Bearer.", details={"field": "scheme"})
    with transaction.atomic(durable=True):
        return PeerCredential.objects.create(
            tenant=Tenant.objects.get(slug=subject.tenant),
            credential_id=mint_opaque(),
            origin=peer_origin_of(url),
            scheme=scheme,
            secret_sealed=seal(secret, purpose=PEER_CREDENTIALS),
            label=label[:200],
        )


def peer_credential_delete(*, subject: Subject, credential_id: str) -> None:
    with transaction.atomic(durable=True):
        peer_credential_get(tenant_slug=subject.tenant, credential_id=credential_id).delete()
