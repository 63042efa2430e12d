"""An issuer's published documents: its metadata and its keys, fetched through the egress guard.

Lane `oidc` reads OpenID Connect discovery (`/.well-known/openid-configuration`), lane `oauth2`
RFC 8414 (`/.well-known/oauth-authorization-server`, inserted before the issuer's path, §3.1). The
document's `issuer` must equal the configured one exactly (RFC 8414 §3.3, OIDC Discovery §4.3):
otherwise another server's metadata could name keys for it. The JWKS comes from its `jwks_uri`.
RFC 7662 introspection posts to its `introspection_endpoint`.

Every request goes through `egress_request`: https only, the guard's address rules at connect
time, no redirects (a 3xx is a failure), no environment proxies, a capped body. Nothing here logs
more than the issuer's sanitised URL and the reason.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx

from apps.core.egress import EgressRefused, sanitize_url
from apps.core.egress_transport import egress_request

logger = logging.getLogger(__name__)

MAX_DOCUMENT_BYTES = 512 * 1024
FETCH_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
INTROSPECTION_TIMEOUT = httpx.Timeout(5.0, connect=3.0)


class IssuerUnreachable(Exception):
    """The issuer's document could not be fetched or is not what it must be. The message names the
    reason and the sanitised URL only (safe for operators and logs)."""


@dataclass(frozen=True)
class IssuerDocuments:
    metadata: dict[str, Any]
    jwks: dict[str, Any]


def well_known_url(issuer: str, lane: str) -> str:
    """The metadata URL: OIDC appends to the issuer; RFC 8414 §3.1 inserts before its path."""
    if lane == "oidc":
        return issuer.rstrip("/") + "/.well-known/openid-configuration"
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-authorization-server{path}"


def _get_json(url: str, what: str) -> Any:
    try:
        response = egress_request(
            "GET", url, headers={"Accept": "application/json"}, timeout=FETCH_TIMEOUT,
            max_body_bytes=MAX_DOCUMENT_BYTES,
        )  # fmt: skip
    except EgressRefused as exc:
        raise IssuerUnreachable(
            f"The egress guard refused the {what} URL {sanitize_url(url)} ({exc.reason})."
        ) from None
    if response.status_code is None:
        raise IssuerUnreachable(f"The {what} at {sanitize_url(url)} did not answer ({response.error}).")
    if response.redirected:
        raise IssuerUnreachable(f"The {what} at {sanitize_url(url)} answered a redirect, which is not followed.")
    if not response.ok:
        raise IssuerUnreachable(f"The {what} at {sanitize_url(url)} answered HTTP {response.status_code}.")
    if response.body_truncated:
        raise IssuerUnreachable(f"The {what} at {sanitize_url(url)} is larger than {MAX_DOCUMENT_BYTES} bytes.")
    try:
        return json.loads(response.body)
    except ValueError:
        raise IssuerUnreachable(f"The {what} at {sanitize_url(url)} is not JSON.") from None


def metadata_fetch(issuer: str, lane: str) -> dict[str, Any]:
    """The issuer's metadata document, checked: a JSON object whose `issuer` is exactly `issuer`
    and whose `jwks_uri` is an https URL."""
    url = well_known_url(issuer, lane)
    document = _get_json(url, "issuer metadata")
    if not isinstance(document, dict):
        raise IssuerUnreachable(f"The issuer metadata at {sanitize_url(url)} is not a JSON object.")
    if document.get("issuer") != issuer:
        raise IssuerUnreachable(
            f"The issuer metadata at {sanitize_url(url)} names another issuer: its `issuer` must equal "
            "the configured issuer exactly."
        )
    jwks_uri = document.get("jwks_uri")
    if not isinstance(jwks_uri, str) or not jwks_uri.startswith("https://"):
        raise IssuerUnreachable(f"The issuer metadata at {sanitize_url(url)} has no https `jwks_uri`.")
    return document


def jwks_fetch(metadata: dict[str, Any]) -> dict[str, Any]:
    """The key set at the metadata's `jwks_uri`: a JSON object with a `keys` list."""
    url = str(metadata["jwks_uri"])
    document = _get_json(url, "issuer key set")
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise IssuerUnreachable(f"The issuer key set at {sanitize_url(url)} is not a JWKS (no `keys` list).")
    return {"keys": [key for key in document["keys"] if isinstance(key, dict)]}


def issuer_documents_fetch(issuer: str, lane: str) -> IssuerDocuments:
    metadata = metadata_fetch(issuer, lane)
    return IssuerDocuments(metadata=metadata, jwks=jwks_fetch(metadata))


class IntrospectionFailed(Exception):
    """No usable RFC 7662 answer (network, 5xx, not JSON, refused client). The caller fails closed."""


def token_introspect(*, endpoint: str, token: str, client_id: str, client_secret: str) -> dict[str, Any]:
    """POST the token to the RFC 7662 endpoint with HTTP Basic client authentication (§2.1), or
    none when `client_id` is empty (an issuer whose metadata allows it); the JSON answer. The token
    travels in the body only and never reaches a log."""
    headers = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
    if client_id:
        credentials = f"{quote(client_id, safe='')}:{quote(client_secret, safe='')}"  # RFC 6749 §2.3.1
        headers["Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode("ascii")
    body = urlencode({"token": token, "token_type_hint": "access_token"}).encode()
    try:
        response = egress_request(
            "POST", endpoint, headers=headers, content=body, timeout=INTROSPECTION_TIMEOUT,
            max_body_bytes=MAX_DOCUMENT_BYTES,
        )  # fmt: skip
    except EgressRefused as exc:
        raise IntrospectionFailed(f"egress refused ({exc.reason})") from None
    if response.status_code is None:
        raise IntrospectionFailed(f"no answer ({response.error})")
    if not response.ok or response.body_truncated:
        raise IntrospectionFailed(f"HTTP {response.status_code}")
    try:
        document = json.loads(response.body)
    except ValueError:
        raise IntrospectionFailed("not JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("active"), bool):
        raise IntrospectionFailed("no boolean `active`")
    return document
